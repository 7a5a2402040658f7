import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.submarineelastic.bridge.Decision;
import org.submarineelastic.bridge.ElasticScheduler;
import org.submarineelastic.bridge.ElasticSchedulerException;
import org.submarineelastic.bridge.InvalidJobException;
import org.submarineelastic.bridge.Job;
import org.submarineelastic.bridge.UnknownJobException;

import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

import py4j.ClientServer;
import py4j.Py4JException;

/**
 * Drives the py4j bridge from a real JVM, the way Submarine's server would.
 *
 * <p>Usage: {@code BRIDGE_TOKEN=... java BridgeCheck MODE JAVA_PORT PYTHON_PORT} (the token in the
 * environment, not on the command line where other users could read it). With {@code BRIDGE_TLS_DIR}
 * both of py4j's sockets speak TLS with the files there (see {@link #tlsContext}). Prints one line per check and
 * {@code PASS <n>} at the end; any failed check prints {@code FAIL ...} and exits 1.
 *
 * <p>Modes: {@code scenario} (every method, arrival, departure, decisions, errors), {@code wrong-token}
 * (calls must be refused), {@code concurrent} (threads reporting at once), {@code memory} (returned
 * objects are released in the JVM), {@code broken} (a controller failure reaches Java as a typed
 * exception), {@code smoke} (a few calls against {@code submarine bridge serve}), {@code probe} (members
 * outside the interface, called through an interface of their names: each must be refused with an
 * {@code ElasticSchedulerException} whose message holds no traceback and no path), {@code idle} (a
 * call, a pause past the bridge's idle timeout, then calls again).
 */
public final class BridgeCheck {
    private static final AtomicInteger checks = new AtomicInteger();

    private static void check(boolean ok, String what) {
        if (!ok) {
            System.out.println("FAIL " + what);
            System.out.flush();
            System.exit(1);
        }
        checks.incrementAndGet();
        System.out.println("ok " + what);
    }

    private static void checkEq(Object expected, Object actual, String what) {
        check(expected == null ? actual == null : expected.equals(actual),
                what + ": expected <" + expected + ">, got <" + actual + ">");
    }

    interface Call {
        void run();
    }

    /**
     * What a caller holding the token could ask of the Python object behind the entry point: py4j
     * calls a Python member by the name of the Java method, so these names reach Python as they are.
     */
    public interface Probe {
        void __setattr__(String name, Object value);

        Object __getattribute__(String name);

        Object __class__();

        Object _call(String method, String jobId, Object call);

        Object listJobs(String extra);

        Object controller();
    }

    private static <T extends Throwable> T expectThrows(Class<T> type, Call call, String what) {
        try {
            call.run();
        } catch (Throwable t) {
            check(type.isInstance(t), what + ": expected " + type.getName() + ", got " + t);
            for (Throwable c = t; c != null; c = c.getCause()) {
                System.out.println("   " + c.getClass().getName() + ": " + c.getMessage());
            }
            return type.cast(t);
        }
        check(false, what + ": expected " + type.getName() + ", nothing was thrown");
        return null;
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        int javaPort = Integer.parseInt(args[1]);
        int pythonPort = Integer.parseInt(args[2]);
        String token = System.getenv("BRIDGE_TOKEN");
        ClientServer.ClientServerBuilder builder = new ClientServer.ClientServerBuilder()
                .javaPort(javaPort)
                .pythonPort(pythonPort)
                .authToken(token)
                .readTimeout(20000);
        String tlsDir = System.getenv("BRIDGE_TLS_DIR");
        if (tlsDir != null) {
            SSLContext tls = tlsContext(Paths.get(tlsDir));
            // The calls to Python go over TLS; py4j's ClientServer ignores a server socket factory for its
            // own port, which the bridge never connects to.
            builder.socketFactory(tls.getSocketFactory());
        }
        ClientServer clientServer = builder.build();
        try {
            ElasticScheduler scheduler = (ElasticScheduler) clientServer.getPythonServerEntryPoint(
                    new Class<?>[] {ElasticScheduler.class});
            switch (mode) {
                case "scenario":
                    scenario(scheduler);
                    break;
                case "wrong-token":
                    wrongToken(scheduler);
                    break;
                case "concurrent":
                    concurrent(scheduler);
                    break;
                case "broken":
                    broken(scheduler);
                    break;
                case "smoke":
                    smoke(scheduler);
                    break;
                case "memory":
                    memory(scheduler, clientServer);
                    break;
                case "probe":
                    probe(scheduler, (Probe) clientServer.getPythonServerEntryPoint(new Class<?>[] {Probe.class}));
                    break;
                case "idle":
                    idle(scheduler, Long.parseLong(args[3]));
                    break;
                default:
                    check(false, "unknown mode " + mode);
            }
        } finally {
            clientServer.shutdown();
        }
        System.out.println("PASS " + checks.get());
        System.out.flush();
        System.exit(0);
    }

    private static void scenario(ElasticScheduler scheduler) {
        check(scheduler.listJobs().isEmpty(), "no jobs at first");

        Job a = scheduler.jobSubmitted("job-a", 1, 4, 4, true);
        checkEq("job-a", a.getJobId(), "submitted job's id");
        checkEq(1, a.getMinWorkers(), "job-a min");
        checkEq(4, a.getMaxWorkers(), "job-a max");
        checkEq(4, a.getWorkers(), "job-a workers");
        checkEq(4, a.getTarget(), "job-a target");
        check(a.isElastic(), "job-a is elastic");
        checkEq("running", a.getState(), "job-a state");
        checkEq("bridge", a.getSource(), "job-a source");
        checkEq(1700000000250L, a.getSubmittedAt().toEpochMilli(), "job-a submitted at (the test's clock)");
        check(scheduler.currentDecision("job-a") == null, "no decision for job-a yet");

        // The test's controller answers job-b's arrival by shrinking job-a (what a fair-share arbiter does).
        Job b = scheduler.jobSubmitted("job-b", 2, 2, 2, false);
        check(!b.isElastic(), "job-b is fixed-size");
        Decision d = scheduler.currentDecision("job-a");
        check(d != null, "job-a has a decision after job-b arrived");
        checkEq("job-a", d.getJobId(), "decision's job");
        checkEq(4, d.getFromWorkers(), "decision from");
        checkEq(2, d.getTargetWorkers(), "decision target");
        checkEq("job-b arrived: fair share", d.getReason(), "decision reason");
        check(!d.isApplied(), "decision not applied yet");
        check(d.getError() == null, "decision has no error");
        checkEq(1700000000250L, d.getTime().toEpochMilli(), "decision time");

        List<Job> jobs = scheduler.listJobs();
        checkEq(2, jobs.size(), "two jobs listed");
        checkEq("job-a", jobs.get(0).getJobId(), "first listed is job-a");
        checkEq(2, jobs.get(0).getTarget(), "job-a's target follows the decision");
        checkEq("job-b", jobs.get(1).getJobId(), "second listed is job-b");
        jobs.add(jobs.get(0));
        checkEq(2, scheduler.listJobs().size(), "the returned list is the caller's own");

        scheduler.reportMetrics("job-a", 2, 100L, 512.5, 0.25);
        scheduler.reportMetrics("job-a", 2, 3000000000L, 520.0);
        checks.addAndGet(2);

        scheduler.jobFinished("job-b");
        checkEq("finished", scheduler.listJobs().get(1).getState(), "job-b finished");
        // Its freed workers go back: the controller grows job-a again.
        checkEq(4, scheduler.currentDecision("job-a").getTargetWorkers(), "job-a grows back after job-b left");

        UnknownJobException unknown = expectThrows(
                UnknownJobException.class, () -> scheduler.currentDecision("nope"), "decision of an unknown job");
        check(unknown.getMessage().contains("'nope'"), "message names the job: " + unknown.getMessage());
        check(unknown instanceof ElasticSchedulerException, "unknown job is an ElasticSchedulerException");
        expectThrows(UnknownJobException.class, () -> scheduler.jobFinished("ghost"), "finishing an unknown job");
        expectThrows(UnknownJobException.class, () -> scheduler.reportMetrics("ghost", 1, 1L, 1.0),
                "metrics of an unknown job");

        InvalidJobException limits = expectThrows(InvalidJobException.class,
                () -> scheduler.jobSubmitted("job-c", 3, 2, 2, true), "min above max");
        check(limits.getMessage().contains("min 3") && limits.getMessage().contains("max 2"),
                "message names the limits: " + limits.getMessage());
        InvalidJobException badId = expectThrows(InvalidJobException.class,
                () -> scheduler.jobSubmitted("Bad_Name", 1, 1, 1, true), "a bad job id");
        check(badId.getMessage().contains("'Bad_Name'"), "message names the id: " + badId.getMessage());
        InvalidJobException nan = expectThrows(InvalidJobException.class,
                () -> scheduler.reportMetrics("job-a", 2, 5L, Double.NaN), "NaN throughput");
        check(nan.getMessage().contains("samples_per_second"), "message names the value: " + nan.getMessage());
        InvalidJobException nullId = expectThrows(InvalidJobException.class,
                () -> scheduler.jobFinished(null), "a null job id");
        check(nullId.getMessage().contains("null"), "message says the id is null: " + nullId.getMessage());

        // After errors the connection still serves.
        checkEq(2, scheduler.listJobs().size(), "still serving after errors");
    }

    private static void wrongToken(ElasticScheduler scheduler) {
        Py4JException refused = expectThrows(Py4JException.class, scheduler::listJobs, "a wrong token is refused");
        check(rootCause(refused).getMessage().contains("Authentication"),
                "refused for its token: " + rootCause(refused));
        expectThrows(Py4JException.class, () -> scheduler.jobSubmitted("intruder", 1, 1, 1, false),
                "a wrong token cannot submit");
    }

    private static Throwable rootCause(Throwable t) {
        while (t.getCause() != null) {
            t = t.getCause();
        }
        return t;
    }

    private static void broken(ElasticScheduler scheduler) {
        ElasticSchedulerException e = expectThrows(ElasticSchedulerException.class, scheduler::listJobs,
                "a failing controller");
        check(e.getMessage().contains("(RuntimeError)"), "message names the kind of failure: " + e.getMessage());
    }

    private static void refused(Call call, String what) {
        ElasticSchedulerException e = expectThrows(ElasticSchedulerException.class, call, what);
        String message = String.valueOf(e.getMessage());
        check(!message.contains("Traceback") && !message.contains(".py") && !message.contains("File \""),
                what + ": no traceback or path in " + message);
    }

    private static void probe(ElasticScheduler scheduler, Probe probe) {
        checkEq(0, scheduler.listJobs().size(), "served before the probes");
        refused(() -> probe.__setattr__("controller", "broken"), "__setattr__ on the entry point");
        refused(() -> probe.__getattribute__("__class__"), "__getattribute__('__class__')");
        refused(() -> probe.__getattribute__("controller"), "__getattribute__('controller')");
        refused(probe::__class__, "__class__");
        refused(() -> probe._call("listJobs", null, null), "a private method");
        refused(() -> probe.listJobs("extra"), "an interface method with arguments it does not take");
        refused(probe::controller, "an attribute");
        checkEq(0, scheduler.listJobs().size(), "the bridge still serves this caller");
    }

    private static void idle(ElasticScheduler scheduler, long pauseMillis) throws InterruptedException {
        checkEq(0, scheduler.listJobs().size(), "a call before the pause");
        Thread.sleep(pauseMillis);
        checkEq(0, scheduler.listJobs().size(), "a call after the bridge closed the idle connection");
        checkEq("bridge", scheduler.jobSubmitted("job-i", 1, 1, 1, false).getSource(), "and another");
    }

    /**
     * TLS as {@code submarine bridge serve --tls-dir} sets it up: the JVM's client certificate and key
     * ({@code jvm.crt}, {@code jvm.key}, PKCS#8), which the bridge requires, and the cluster's CA
     * ({@code ca.crt}), which the bridge's certificate must chain to.
     */
    private static SSLContext tlsContext(Path dir) throws Exception {
        CertificateFactory x509 = CertificateFactory.getInstance("X.509");
        Certificate ca;
        Certificate cert;
        try (InputStream in = Files.newInputStream(dir.resolve("ca.crt"))) {
            ca = x509.generateCertificate(in);
        }
        try (InputStream in = Files.newInputStream(dir.resolve("jvm.crt"))) {
            cert = x509.generateCertificate(in);
        }
        String pem = new String(Files.readAllBytes(dir.resolve("jvm.key")), StandardCharsets.US_ASCII);
        byte[] der = Base64.getMimeDecoder().decode(pem.replaceAll("-----[A-Z ]+-----", ""));
        PrivateKey key = KeyFactory.getInstance("EC").generatePrivate(new PKCS8EncodedKeySpec(der));
        char[] password = "unused".toCharArray();
        KeyStore keys = KeyStore.getInstance("PKCS12");
        keys.load(null, null);
        keys.setKeyEntry("jvm", key, password, new Certificate[] {cert, ca});
        KeyStore trusted = KeyStore.getInstance("PKCS12");
        trusted.load(null, null);
        trusted.setCertificateEntry("ca", ca);
        KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
        kmf.init(keys, password);
        TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        tmf.init(trusted);
        SSLContext context = SSLContext.getInstance("TLS");
        context.init(kmf.getKeyManagers(), tmf.getTrustManagers(), null);
        return context;
    }

    private static void smoke(ElasticScheduler scheduler) {
        checkEq("bridge", scheduler.jobSubmitted("job-s", 1, 3, 2, true).getSource(), "submitted through serve");
        checkEq(1, scheduler.listJobs().size(), "one job listed");
        check(scheduler.currentDecision("job-s") == null, "no decision from the in-memory controller");
        scheduler.jobFinished("job-s");
        checkEq("finished", scheduler.listJobs().get(0).getState(), "job-s finished");
    }

    private static void concurrent(ElasticScheduler scheduler) throws Exception {
        scheduler.jobSubmitted("job-c", 1, 8, 2, true);
        int threads = 4;
        int reports = 50;
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        List<Future<Integer>> done = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            final int worker = t;
            done.add(pool.submit(() -> {
                for (int i = 0; i < reports; i++) {
                    scheduler.reportMetrics("job-c", 2, (long) (worker * reports + i), 100.0 + worker);
                    checkEq(1, scheduler.listJobs().size(), "one job, seen from thread " + worker);
                }
                return reports;
            }));
        }
        int total = 0;
        for (Future<Integer> f : done) {
            total += f.get(60, TimeUnit.SECONDS);
        }
        pool.shutdown();
        checkEq(threads * reports, total, "every thread reported");
    }

    private static void memory(ElasticScheduler scheduler, ClientServer clientServer) throws Exception {
        scheduler.jobSubmitted("job-m", 1, 2, 1, true);
        for (int i = 0; i < 200; i++) {
            checkEq(1, scheduler.listJobs().size(), "list " + i);
        }
        expectThrows(UnknownJobException.class, () -> scheduler.jobFinished("ghost"), "an error object too");
        // The bridge releases what it returned (on the Java port); wait until the JVM holds few of them.
        java.util.Map<String, Object> bindings = clientServer.getJavaServer().getGateway().getBindings();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
        int held = bindings.size();
        while (held > 3 && System.nanoTime() < deadline) {
            Thread.sleep(50);
            held = bindings.size();
        }
        if (held > 3) {
            java.util.Map<String, Integer> kinds = new java.util.TreeMap<>();
            for (Object o : new ArrayList<>(bindings.values())) {
                kinds.merge(o == null ? "null" : o.getClass().getName(), 1, Integer::sum);
            }
            System.out.println("held: " + kinds);
        }
        check(held <= 3, "returned objects are released in the JVM (held: " + held + ")");
    }
}
