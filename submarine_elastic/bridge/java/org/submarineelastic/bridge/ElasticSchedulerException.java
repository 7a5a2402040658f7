package org.submarineelastic.bridge;

/** Base of the errors the scheduler reports to a JVM caller; the message says what went wrong. */
public class ElasticSchedulerException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public ElasticSchedulerException(String message) {
        super(message);
    }
}
