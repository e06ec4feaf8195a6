package acker.bench;

import java.io.IOException;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.lang.ref.Reference;
import java.lang.reflect.Field;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.apache.storm.Constants;
import org.apache.storm.daemon.Acker;
import org.apache.storm.task.OutputCollector;
import org.apache.storm.tuple.Tuple;
import org.apache.storm.tuple.Values;
import org.apache.storm.utils.RotatingMap;
import org.apache.storm.utils.VersionInfo;

/**
 * Drives Storm's acker ({@link Acker}, unmodified, from storm-client) with a recorded message sequence.
 *
 * <p>Input: a file of 17-byte little-endian records, one per message: kind (byte: 0 init, 1 ack, 2 anchor, 3 ok,
 * 4 fail, 5 reset-timeout, 6 tick: the kinds of {@code acker.columnar.block.Kind}), anchor (int64), value (int64).
 * Mapped to Storm's acker streams: init to {@code __ack_init} [anchor, value, spout task]; ack (and the separate
 * anchor/ok forms, also plain XOR updates) to {@code __ack_ack} [anchor, value]; fail to {@code __ack_fail}
 * [anchor]; reset to {@code __ack_reset_timeout} [anchor]; tick to a system tick tuple (one rotation).
 *
 * <ul>
 *   <li>{@code throughput FILE [WARMUP_MESSAGES] [PASSES] [BLOCK]}: every tuple is built before timing (each with
 *       its own boxed values, as deserialisation gives them); passes of the whole sequence through a fresh acker, on
 *       this thread, first untimed until at least WARMUP_MESSAGES messages have run (JIT), then PASSES timed ones,
 *       each after a full GC. Reports the median rate by wall clock and by CPU time: this thread's, plus the time
 *       spent in collections during the pass (on a shared machine, the figure that does not count waiting for a
 *       core); and the wall time of every BLOCK messages of the timed passes (the project's columnar tracker takes
 *       its messages in blocks of that many), for their percentiles.</li>
 *   <li>{@code memory FILE}: the file holds only inits of trees that never complete; heap used after a full GC
 *       with all of them pending, minus heap used before (the acker's classes already loaded and initialised),
 *       divided by the number of trees. Tuples are built one at a time and dropped, so the key the acker keeps
 *       (the tuple's boxed anchor) is counted, as in a worker.</li>
 * </ul>
 *
 * <p>Prints one JSON object on stdout. Run with a fixed heap and the serial collector for stable numbers.
 */
public final class AckerBench {
    static final int SPOUT_TASK = 1;
    static final String SPOUT = "sentences";
    static final String BOLT = "bolt";
    static final int RECORD = 17;

    private AckerBench() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: AckerBench throughput FILE [WARMUP_MESSAGES] [PASSES] [BLOCK] | memory FILE");
            System.exit(2);
        }
        Map<String, Object> out = switch (args[0]) {
            case "throughput" -> throughput(read(Path.of(args[1])),
                    args.length > 2 ? Long.parseLong(args[2]) : 3_000_000L,
                    args.length > 3 ? Integer.parseInt(args[3]) : 5,
                    args.length > 4 ? Integer.parseInt(args[4]) : 8192);
            case "memory" -> memory(read(Path.of(args[1])));
            default -> throw new IllegalArgumentException("unknown mode " + args[0]);
        };
        out.put("storm_version", VersionInfo.getVersion());
        out.put("java_version", System.getProperty("java.version"));
        out.put("java_vm", System.getProperty("java.vm.name") + " " + System.getProperty("java.vm.version"));
        out.put("gc", ManagementFactory.getGarbageCollectorMXBeans().stream().map(b -> b.getName()).toList());
        out.put("max_heap_bytes", Runtime.getRuntime().maxMemory());
        System.out.println(json(out));
    }

    /** The recorded messages, as columns. */
    record Messages(byte[] kinds, long[] anchors, long[] values) {
        int size() {
            return kinds.length;
        }
    }

    static Messages read(Path file) throws IOException {
        ByteBuffer buf = ByteBuffer.wrap(Files.readAllBytes(file)).order(ByteOrder.LITTLE_ENDIAN);
        if (buf.remaining() % RECORD != 0) {
            throw new IOException(file + ": not a whole number of " + RECORD + "-byte records");
        }
        int n = buf.remaining() / RECORD;
        byte[] kinds = new byte[n];
        long[] anchors = new long[n];
        long[] values = new long[n];
        for (int i = 0; i < n; i++) {
            kinds[i] = buf.get();
            anchors[i] = buf.getLong();
            values[i] = buf.getLong();
        }
        return new Messages(kinds, anchors, values);
    }

    /** The tuple Storm's acker receives for one message (fresh boxed values every time, as deserialised). */
    static Tuple tuple(byte kind, long anchor, long value) {
        return switch (kind) {
            case 0 -> new BenchTuple(SPOUT, Acker.ACKER_INIT_STREAM_ID, SPOUT_TASK,
                    new Values(Long.valueOf(anchor), Long.valueOf(value), Integer.valueOf(SPOUT_TASK)));
            case 1, 2, 3 -> new BenchTuple(BOLT, Acker.ACKER_ACK_STREAM_ID, 2,
                    new Values(Long.valueOf(anchor), Long.valueOf(value)));
            case 4 -> new BenchTuple(BOLT, Acker.ACKER_FAIL_STREAM_ID, 2, new Values(Long.valueOf(anchor)));
            case 5 -> new BenchTuple(BOLT, Acker.ACKER_RESET_TIMEOUT_STREAM_ID, 2, new Values(Long.valueOf(anchor)));
            case 6 -> new BenchTuple(Constants.SYSTEM_COMPONENT_ID, Constants.SYSTEM_TICK_STREAM_ID,
                    (int) Constants.SYSTEM_TASK_ID, new Values(30));
            default -> throw new IllegalArgumentException("unknown message kind " + kind);
        };
    }

    static Acker newAcker(CountingCollector collector) {
        Acker acker = new Acker();
        acker.prepare(new HashMap<>(), null, new OutputCollector(collector)); // prepare uses neither conf nor context
        return acker;
    }

    static int pending(Acker acker) throws ReflectiveOperationException {
        Field field = Acker.class.getDeclaredField("pending");
        field.setAccessible(true);
        return ((RotatingMap<?, ?>) field.get(acker)).size();
    }

    static Map<String, Object> throughput(Messages m, long warmupMessages, int passes, int block) throws Exception {
        int n = m.size();
        Tuple[] tuples = new Tuple[n];
        for (int i = 0; i < n; i++) {
            tuples[i] = tuple(m.kinds[i], m.anchors[i], m.values[i]);
        }
        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
        long warmed = 0;
        int warmupPasses = 0;
        while (warmed < warmupMessages || warmupPasses < 1) {
            run(tuples, new CountingCollector(), block, null);
            warmed += n;
            warmupPasses++;
        }
        double[] seconds = new double[passes];
        double[] cpuSeconds = new double[passes];
        double[] gcSeconds = new double[passes];
        int blocks = (n + block - 1) / block;
        double[] blockSeconds = new double[passes * blocks];
        CountingCollector last = null;
        int lastPending = 0;
        for (int p = 0; p < passes; p++) {
            System.gc();
            last = new CountingCollector();
            long gc = gcMillis();
            long cpu = threads.getCurrentThreadCpuTime();
            long started = System.nanoTime();
            long[] ends = new long[blocks];
            Acker acker = run(tuples, last, block, ends);
            seconds[p] = (System.nanoTime() - started) / 1e9;
            cpuSeconds[p] = (threads.getCurrentThreadCpuTime() - cpu) / 1e9;
            gcSeconds[p] = (gcMillis() - gc) / 1e3;
            lastPending = pending(acker);
            for (int b = 0; b < blocks; b++) {
                blockSeconds[p * blocks + b] = (ends[b] - (b == 0 ? started : ends[b - 1])) / 1e9;
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("mode", "throughput");
        out.put("messages", n);
        out.put("warmup_passes", warmupPasses);
        out.put("seconds", seconds);
        out.put("thread_cpu_seconds", cpuSeconds);
        out.put("gc_seconds", gcSeconds);
        out.put("block", block);
        out.put("block_seconds", blockSeconds);
        double[] cpuAndGc = new double[passes];
        for (int p = 0; p < passes; p++) {
            cpuAndGc[p] = cpuSeconds[p] + gcSeconds[p];
        }
        out.put("messages_per_second", n / median(seconds));
        out.put("messages_per_cpu_second", n / median(cpuAndGc));
        out.put("acked", last.acked);
        out.put("failed", last.failed);
        out.put("resets", last.resets);
        out.put("input_acks", last.inputAcks);
        out.put("pending_after", lastPending);
        return out;
    }

    /** Time spent in collections so far (the serial collector runs them in the VM thread, not this one). */
    static long gcMillis() {
        long total = 0;
        for (GarbageCollectorMXBean bean : ManagementFactory.getGarbageCollectorMXBeans()) {
            total += bean.getCollectionTime();
        }
        return total;
    }

    static double median(double[] values) {
        double[] sorted = values.clone();
        Arrays.sort(sorted);
        int k = sorted.length / 2;
        return sorted.length % 2 == 1 ? sorted[k] : (sorted[k - 1] + sorted[k]) / 2;
    }

    /** Every tuple through a fresh acker; with {@code ends}, the time at the end of every {@code block} tuples. */
    static Acker run(Tuple[] tuples, CountingCollector collector, int block, long[] ends) {
        Acker acker = newAcker(collector);
        for (int start = 0, b = 0; start < tuples.length; start += block, b++) {
            int end = Math.min(tuples.length, start + block);
            for (int i = start; i < end; i++) {
                acker.execute(tuples[i]);
            }
            if (ends != null) {
                ends[b] = System.nanoTime();
            }
        }
        return acker;
    }

    static long usedHeapAfterGc() {
        Runtime rt = Runtime.getRuntime();
        long used = Long.MAX_VALUE;
        for (int i = 0; i < 3; i++) { // until it stops shrinking
            System.gc();
            long now = rt.totalMemory() - rt.freeMemory();
            if (now >= used) {
                break;
            }
            used = now;
        }
        return used;
    }

    static Map<String, Object> memory(Messages m) throws Exception {
        int n = m.size();
        for (byte kind : m.kinds) {
            if (kind != 0) {
                throw new IllegalArgumentException("the memory file must hold inits only");
            }
        }
        // load and initialise everything the acker touches (Utils reads Storm's config) before the baseline
        Acker probe = newAcker(new CountingCollector());
        probe.execute(tuple((byte) 0, 1L, 3L));
        probe.execute(tuple((byte) 1, 1L, 3L));
        probe.execute(tuple((byte) 6, 0L, 0L));
        pending(probe);
        probe = null;

        long before = usedHeapAfterGc();
        CountingCollector collector = new CountingCollector();
        Acker acker = newAcker(collector);
        for (int i = 0; i < n; i++) {
            acker.execute(tuple(m.kinds[i], m.anchors[i], m.values[i]));
        }
        long after = usedHeapAfterGc();
        int pending = pending(acker);
        Reference.reachabilityFence(acker);
        Reference.reachabilityFence(m);
        if (pending != n || collector.acked != 0) {
            throw new IllegalStateException("expected " + n + " pending trees, got " + pending);
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("mode", "memory");
        out.put("pending", pending);
        out.put("heap_before", before);
        out.put("heap_after", after);
        out.put("bytes_per_tree", (after - before) / (double) n);
        return out;
    }

    static String json(Object v) {
        if (v instanceof Map<?, ?> map) {
            List<String> parts = new ArrayList<>();
            map.forEach((k, x) -> parts.add(json(k.toString()) + ": " + json(x)));
            return "{" + String.join(", ", parts) + "}";
        } else if (v instanceof List<?> list) {
            return "[" + String.join(", ", list.stream().map(AckerBench::json).toList()) + "]";
        } else if (v instanceof double[] arr) {
            return json(Arrays.stream(arr).boxed().toList());
        } else if (v instanceof Double d) {
            return String.format(Locale.ROOT, "%.9g", d);
        } else if (v instanceof Number || v instanceof Boolean) {
            return v.toString();
        } else {
            return "\"" + v.toString().replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
        }
    }
}
