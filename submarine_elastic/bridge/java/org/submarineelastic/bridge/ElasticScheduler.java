package org.submarineelastic.bridge;

import java.util.List;

/**
 * The elastic scheduler of submarine-elastic, as a JVM caller (Submarine's server, any JVM scheduler)
 * sees it.
 *
 * <p>The Python side implements this interface ({@code submarine bridge serve}); a JVM obtains it
 * through py4j's {@code ClientServer}:
 *
 * <pre>{@code
 * ClientServer cs = new ClientServer.ClientServerBuilder()
 *     .javaPort(25333).pythonPort(25334).authToken(token)
 *     .socketFactory(tls.getSocketFactory())  // an SSLContext with jvm.crt, jvm.key and ca.crt
 *     .build();
 * ElasticScheduler scheduler = (ElasticScheduler) cs.getPythonServerEntryPoint(
 *     new Class[] {ElasticScheduler.class});
 * }</pre>
 *
 * <p>{@code submarine bridge serve} speaks mutual TLS unless started with {@code --insecure}: it writes the
 * JVM's client certificate, its key and the cluster's CA into its {@code --tls-dir}. The Python side never
 * connects to the Java port.
 *
 * <p>Every call is a blocking round trip to the Python process over loopback TCP, normally well under
 * a millisecond plus what the controller needs (a database write: at most a few seconds). Calls may
 * come from many threads at once; py4j gives each calling thread its own connection. Decisions are
 * made and applied in the background: a caller polls {@link #currentDecision(String)} or
 * {@link #listJobs()} to learn them.
 *
 * <p>Errors: {@link UnknownJobException} and {@link InvalidJobException} (both
 * {@link ElasticSchedulerException}s, unchecked) carry the controller's message, which names the job
 * or value at fault; a call of anything but these methods (through another interface naming Python
 * members) is an {@link ElasticSchedulerException} naming it. No message carries a Python traceback.
 * A refused token, a stopped Python side or a broken connection surfaces as
 * py4j's own unchecked {@code py4j.Py4JException} (or a subclass such as
 * {@code py4j.Py4JAuthenticationException}).
 */
public interface ElasticScheduler {

    /**
     * A job arrived. The scheduler records it and re-plans the cluster, which may take workers from
     * other elastic jobs. Submitting a known id again replaces its limits.
     *
     * @param jobId the job's (YARN service) name, {@code [a-z][a-z0-9-]*}
     * @param minWorkers the fewest workers it may run with, at least 1
     * @param maxWorkers the most workers it may run with, at least {@code minWorkers}
     * @param workers the workers it starts with, within the limits
     * @param elastic whether its size may change; a fixed-size job has {@code minWorkers == maxWorkers}
     * @return the job as recorded
     * @throws InvalidJobException bad id or limits (the message names the value)
     */
    Job jobSubmitted(String jobId, int minWorkers, int maxWorkers, int workers, boolean elastic);

    /**
     * A job arrived in a YARN queue: as {@link #jobSubmitted(String, int, int, int, boolean)}, and the
     * scheduler decides its size within what that queue may hold (its guarantee, and what it may borrow up
     * to its maximum).
     *
     * @param queue the YARN queue it runs in, a leaf name or a dotted path ({@code prod}, {@code root.prod});
     *     null: the cluster's default
     * @return the job as recorded
     * @throws InvalidJobException bad id, limits or queue name (the message names the value)
     */
    Job jobSubmitted(String jobId, int minWorkers, int maxWorkers, int workers, boolean elastic, String queue);

    /**
     * A job left; its workers go back to the others.
     *
     * @param jobId the job's name
     * @throws UnknownJobException no such job
     */
    void jobFinished(String jobId);

    /**
     * Training metrics of a job whose loss is not known (for example, a job that reports throughput
     * only).
     *
     * @param jobId the job's name
     * @param worldSize the worker count the metrics were measured with, at least 1
     * @param step the global training step, at least 0
     * @param samplesPerSecond the job's aggregate throughput, finite and at least 0
     * @throws UnknownJobException no such job
     * @throws InvalidJobException a value out of range or not finite (named in the message)
     */
    void reportMetrics(String jobId, int worldSize, long step, double samplesPerSecond);

    /**
     * Training metrics of a job, with its current loss.
     *
     * @param loss the training loss at {@code step}, finite
     * @see #reportMetrics(String, int, long, double)
     * @throws UnknownJobException no such job
     * @throws InvalidJobException a value out of range or not finite (named in the message)
     */
    void reportMetrics(String jobId, int worldSize, long step, double samplesPerSecond, double loss);

    /**
     * The latest size change decided for a job: its target worker count and the policy's reason.
     *
     * @param jobId the job's name
     * @return the decision, or {@code null} if the job's size was never changed (it keeps the
     *     workers it was submitted with: {@link Job#getTarget()})
     * @throws UnknownJobException no such job
     */
    Decision currentDecision(String jobId);

    /**
     * Every job the scheduler knows (submitted here, from its CLI, or seen on the cluster), finished
     * ones included, in submission order.
     *
     * @return a new list the caller owns
     */
    List<Job> listJobs();
}
