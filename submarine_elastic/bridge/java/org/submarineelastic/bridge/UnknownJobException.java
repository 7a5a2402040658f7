package org.submarineelastic.bridge;

/** No job of that id is known to the scheduler; the message names the id. */
public class UnknownJobException extends ElasticSchedulerException {
    private static final long serialVersionUID = 1L;

    public UnknownJobException(String message) {
        super(message);
    }
}
