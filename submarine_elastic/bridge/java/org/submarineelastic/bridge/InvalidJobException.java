package org.submarineelastic.bridge;

/** A job or its metrics were reported with a bad id, limit or value; the message names it. */
public class InvalidJobException extends ElasticSchedulerException {
    private static final long serialVersionUID = 1L;

    public InvalidJobException(String message) {
        super(message);
    }
}
