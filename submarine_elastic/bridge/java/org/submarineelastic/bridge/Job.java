package org.submarineelastic.bridge;

import java.time.Instant;
import java.util.Objects;

/** A job as the scheduler knows it: an immutable snapshot taken when it was returned. */
public final class Job {
    private final String jobId;
    private final int minWorkers;
    private final int maxWorkers;
    private final int workers;
    private final int target;
    private final boolean elastic;
    private final String state;
    private final long submittedAtMillis;
    private final String source;

    /**
     * Built by the Python side; callers read it.
     *
     * @param submittedAtMillis when the scheduler learned of the job, milliseconds since the epoch
     */
    public Job(
            String jobId,
            int minWorkers,
            int maxWorkers,
            int workers,
            int target,
            boolean elastic,
            String state,
            long submittedAtMillis,
            String source) {
        this.jobId = Objects.requireNonNull(jobId, "jobId");
        this.minWorkers = minWorkers;
        this.maxWorkers = maxWorkers;
        this.workers = workers;
        this.target = target;
        this.elastic = elastic;
        this.state = Objects.requireNonNull(state, "state");
        this.submittedAtMillis = submittedAtMillis;
        this.source = Objects.requireNonNull(source, "source");
    }

    /** @return the job's (YARN service) name */
    public String getJobId() {
        return jobId;
    }

    /** @return the fewest workers it may run with */
    public int getMinWorkers() {
        return minWorkers;
    }

    /** @return the most workers it may run with */
    public int getMaxWorkers() {
        return maxWorkers;
    }

    /** @return the worker count it runs with now, as last confirmed */
    public int getWorkers() {
        return workers;
    }

    /** @return the worker count last decided for it (its starting size until a decision is made) */
    public int getTarget() {
        return target;
    }

    /** @return whether its size may change */
    public boolean isElastic() {
        return elastic;
    }

    /** @return {@code pending}, {@code running} or {@code finished} */
    public String getState() {
        return state;
    }

    /** @return when the scheduler learned of the job */
    public Instant getSubmittedAt() {
        return Instant.ofEpochMilli(submittedAtMillis);
    }

    /** @return {@code cli}, {@code bridge} (a JVM caller) or {@code yarn} (seen on the cluster) */
    public String getSource() {
        return source;
    }

    @Override
    public boolean equals(Object other) {
        if (this == other) {
            return true;
        }
        if (!(other instanceof Job)) {
            return false;
        }
        Job that = (Job) other;
        return minWorkers == that.minWorkers
                && maxWorkers == that.maxWorkers
                && workers == that.workers
                && target == that.target
                && elastic == that.elastic
                && submittedAtMillis == that.submittedAtMillis
                && jobId.equals(that.jobId)
                && state.equals(that.state)
                && source.equals(that.source);
    }

    @Override
    public int hashCode() {
        return Objects.hash(jobId, minWorkers, maxWorkers, workers, target, elastic, state, submittedAtMillis, source);
    }

    @Override
    public String toString() {
        return "Job{" + jobId + " " + state + ", workers=" + workers + ", target=" + target + " in ["
                + minWorkers + ", " + maxWorkers + "]" + (elastic ? ", elastic" : ", fixed") + ", source=" + source
                + "}";
    }
}
