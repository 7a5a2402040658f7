package org.submarineelastic.bridge;

import java.time.Instant;
import java.util.Objects;

/** One size change the scheduler decided for a job, with why and what came of it (immutable). */
public final class Decision {
    private final String jobId;
    private final long timeMillis;
    private final int fromWorkers;
    private final int targetWorkers;
    private final String reason;
    private final boolean applied;
    private final String error;

    /**
     * Built by the Python side; callers read it.
     *
     * @param timeMillis when it was decided, milliseconds since the epoch
     * @param error why applying it failed, or {@code null}
     */
    public Decision(
            String jobId,
            long timeMillis,
            int fromWorkers,
            int targetWorkers,
            String reason,
            boolean applied,
            String error) {
        this.jobId = Objects.requireNonNull(jobId, "jobId");
        this.timeMillis = timeMillis;
        this.fromWorkers = fromWorkers;
        this.targetWorkers = targetWorkers;
        this.reason = Objects.requireNonNull(reason, "reason");
        this.applied = applied;
        this.error = error;
    }

    /** @return the job's name */
    public String getJobId() {
        return jobId;
    }

    /** @return when it was decided */
    public Instant getTime() {
        return Instant.ofEpochMilli(timeMillis);
    }

    /** @return the worker count before the change */
    public int getFromWorkers() {
        return fromWorkers;
    }

    /** @return the worker count the job should have */
    public int getTargetWorkers() {
        return targetWorkers;
    }

    /** @return the policy's one-line reason */
    public String getReason() {
        return reason;
    }

    /** @return whether the job's driver confirmed the new size */
    public boolean isApplied() {
        return applied;
    }

    /** @return why applying it failed, or {@code null} */
    public String getError() {
        return error;
    }

    @Override
    public boolean equals(Object other) {
        if (this == other) {
            return true;
        }
        if (!(other instanceof Decision)) {
            return false;
        }
        Decision that = (Decision) other;
        return timeMillis == that.timeMillis
                && fromWorkers == that.fromWorkers
                && targetWorkers == that.targetWorkers
                && applied == that.applied
                && jobId.equals(that.jobId)
                && reason.equals(that.reason)
                && Objects.equals(error, that.error);
    }

    @Override
    public int hashCode() {
        return Objects.hash(jobId, timeMillis, fromWorkers, targetWorkers, reason, applied, error);
    }

    @Override
    public String toString() {
        return "Decision{" + jobId + " " + fromWorkers + " -> " + targetWorkers + ": " + reason
                + (applied ? ", applied" : "") + (error != null ? ", error: " + error : "") + "}";
    }
}
