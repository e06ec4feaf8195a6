package acker.bench;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.storm.Config;
import org.apache.storm.LocalCluster;
import org.apache.storm.generated.KillOptions;
import org.apache.storm.generated.StormTopology;
import org.apache.storm.spout.SpoutOutputCollector;
import org.apache.storm.task.OutputCollector;
import org.apache.storm.task.TopologyContext;
import org.apache.storm.topology.OutputFieldsDeclarer;
import org.apache.storm.topology.TopologyBuilder;
import org.apache.storm.topology.base.BaseRichBolt;
import org.apache.storm.topology.base.BaseRichSpout;
import org.apache.storm.tuple.Fields;
import org.apache.storm.tuple.Tuple;
import org.apache.storm.tuple.Values;
import org.apache.storm.utils.VersionInfo;

/**
 * Storm's streaming word count in a LocalCluster, acking on vs off: sentences → spout → split → count.
 *
 * <p>Usage: {@code StormWordCountBench --sentences FILE [--repeat N] [--warmup SENTENCES] [--timeout-s S]}
 * {@code [--modes off,on,on:N] [--paced FRACTION]}.
 * One LocalCluster (in this JVM) for the whole run. Modes: {@code off} (no message ids, topology.acker.executors = 0),
 * {@code on} (message ids, one acker, Storm's default topology.max.spout.pending: unset) and {@code on:N} (the same
 * with topology.max.spout.pending = N). Each repetition runs every mode in turn (alternating), each a fresh topology
 * over the same sentences, killed once every word is counted (and, with acking on, every sentence acked). Before the
 * measured runs, each mode runs once on the first SENTENCES sentences (JIT warm-up, not reported). Parallelism 1 for
 * every component, one worker. Output lines (stdout): {@code STORM_VERSION v}, {@code JAVA_VERSION v},
 * {@code WORKLOAD sentences=n words=w}, {@code WARMUP ...} and {@code RUN ...} lines, then with {@code --paced F} > 0
 * one {@code PACED ...} line a round (the last acking mode given, its spout emitting at F × that mode's median
 * sentences/s), {@code MEMORY vmhwm_kib=k} (this JVM's peak resident memory, over every run), {@code DONE}. Words
 * counted per second are measured in the count bolt, from the first counted word to the last: topology start-up and
 * tear-down are excluded. With acking on, each sentence's complete latency is Storm's: from its emit to its ack at the
 * spout.
 */
public final class StormWordCountBench {
    static final String SPOUT = "sentences";
    static final String SPLIT = "split";
    static final String COUNT = "count";

    /** Shared by the benchmark thread and the executors: LocalCluster runs the worker in this JVM. */
    static final class Probe {
        static final AtomicLong COUNTED = new AtomicLong();
        static final AtomicLong ACKED = new AtomicLong();
        static final AtomicLong FAILED = new AtomicLong();
        static volatile long firstNs;
        static volatile long lastNs;
        /** Each sentence's complete latency (its emit → its ack at the spout), ns; written by the spout's thread. */
        static volatile long[] completeNs = new long[0];

        static void reset(int sentences) {
            COUNTED.set(0);
            ACKED.set(0);
            FAILED.set(0);
            firstNs = 0;
            lastNs = 0;
            completeNs = new long[sentences];
        }
    }

    /**
     * Emits each sentence of the file once; with a message id (tracked by the acker) when acking is on. Paced
     * ({@code perS} > 0), sentence i is emitted once {@code i / perS} seconds have passed since the first, or as soon
     * after as the spout's thread comes back to it; else as fast as Storm takes them.
     */
    public static final class SentenceSpout extends BaseRichSpout {
        private final String path;
        private final int limit;
        private final boolean acking;
        private final double perS;
        private transient String[] sentences;
        private transient long[] emittedNs;
        private transient int next;
        private transient long beginNs;
        private transient SpoutOutputCollector collector;

        public SentenceSpout(String path, int limit, boolean acking, double perS) {
            this.path = path;
            this.limit = limit;
            this.acking = acking;
            this.perS = perS;
        }

        @Override
        public void open(Map<String, Object> conf, TopologyContext context, SpoutOutputCollector collector) {
            this.collector = collector;
            this.sentences = readSentences(path, limit).toArray(new String[0]);
            this.emittedNs = new long[sentences.length];
            this.next = 0;
        }

        @Override
        public void nextTuple() {
            if (next >= sentences.length) {
                return; // all emitted: the spout wait strategy idles the executor
            }
            long now = System.nanoTime();
            if (next == 0) {
                beginNs = now;
            } else if (perS > 0 && now < beginNs + (long) (next * 1e9 / perS)) {
                return; // not due yet
            }
            int i = next++;
            if (acking) {
                emittedNs[i] = now;
                collector.emit(new Values(sentences[i]), i);
            } else {
                collector.emit(new Values(sentences[i]));
            }
        }

        @Override
        public void ack(Object msgId) {
            int i = (Integer) msgId;
            Probe.completeNs[i] = System.nanoTime() - emittedNs[i];
            Probe.ACKED.incrementAndGet(); // after the write: the benchmark thread reads the latencies once all acked
        }

        @Override
        public void fail(Object msgId) {
            Probe.FAILED.incrementAndGet(); // not replayed: a failure would show in the RUN line
        }

        @Override
        public void declareOutputFields(OutputFieldsDeclarer declarer) {
            declarer.declare(new Fields("sentence"));
        }
    }

    /** One tuple per word, anchored to the sentence when acking is on; acks the sentence. */
    public static final class SplitBolt extends BaseRichBolt {
        private final boolean acking;
        private transient OutputCollector collector;

        public SplitBolt(boolean acking) {
            this.acking = acking;
        }

        @Override
        public void prepare(Map<String, Object> conf, TopologyContext context, OutputCollector collector) {
            this.collector = collector;
        }

        @Override
        public void execute(Tuple input) {
            for (String word : input.getString(0).split(" ")) {
                if (acking) {
                    collector.emit(input, new Values(word));
                } else {
                    collector.emit(new Values(word));
                }
            }
            collector.ack(input);
        }

        @Override
        public void declareOutputFields(OutputFieldsDeclarer declarer) {
            declarer.declare(new Fields("word"));
        }
    }

    /** Running count per word (fields-grouped by word); emits (word, count) unanchored, acks its input. */
    public static final class CountBolt extends BaseRichBolt {
        private transient Map<String, Long> counts;
        private transient OutputCollector collector;

        @Override
        public void prepare(Map<String, Object> conf, TopologyContext context, OutputCollector collector) {
            this.collector = collector;
            this.counts = new HashMap<>();
        }

        @Override
        public void execute(Tuple input) {
            String word = input.getString(0);
            long count = counts.merge(word, 1L, Long::sum);
            collector.emit(new Values(word, count));
            collector.ack(input);
            long now = System.nanoTime();
            if (Probe.firstNs == 0) {
                Probe.firstNs = now;
            }
            Probe.lastNs = now;
            Probe.COUNTED.incrementAndGet();
        }

        @Override
        public void declareOutputFields(OutputFieldsDeclarer declarer) {
            declarer.declare(new Fields("word", "count"));
        }
    }

    static List<String> readSentences(String path, int limit) {
        try {
            List<String> all = Files.readAllLines(Path.of(path), StandardCharsets.UTF_8);
            List<String> nonEmpty = new ArrayList<>(all.size());
            for (String line : all) {
                if (!line.isEmpty()) {
                    nonEmpty.add(line);
                }
            }
            return nonEmpty.subList(0, Math.min(limit, nonEmpty.size()));
        } catch (IOException e) {
            throw new IllegalStateException("cannot read " + path, e);
        }
    }

    static long countWords(List<String> sentences) {
        long words = 0;
        for (String s : sentences) {
            words += s.split(" ").length;
        }
        return words;
    }

    static StormTopology topology(String path, int limit, boolean acking, double perS) {
        TopologyBuilder builder = new TopologyBuilder();
        builder.setSpout(SPOUT, new SentenceSpout(path, limit, acking, perS), 1);
        builder.setBolt(SPLIT, new SplitBolt(acking), 1).shuffleGrouping(SPOUT);
        builder.setBolt(COUNT, new CountBolt(), 1).fieldsGrouping(SPLIT, new Fields("word"));
        return builder.createTopology();
    }

    /** A mode: acking on or off, and topology.max.spout.pending (null: Storm's default, unset = unlimited). */
    record Mode(String name, boolean acking, Integer maxSpoutPending) {
        /** "off", "on", or "on:N" (acking on with topology.max.spout.pending = N). */
        static Mode parse(String spec) {
            if (spec.equals("off")) {
                return new Mode(spec, false, null);
            }
            if (spec.equals("on")) {
                return new Mode(spec, true, null);
            }
            if (spec.startsWith("on:")) {
                return new Mode(spec, true, Integer.valueOf(spec.substring(3)));
            }
            throw new IllegalArgumentException("unknown mode " + spec + " (off, on, on:N)");
        }
    }

    /**
     * Runs one topology to completion, its spout paced at {@code perS} sentences a second if positive; returns
     * {words/s, seconds from the first counted word to the last, seconds from submission to the first counted word,
     * seconds from kill until the topology is gone, and with acking on the complete latency's p50, p99 and maximum
     * in ms (else NaN)}; throws on timeout.
     */
    static double[] runOnce(LocalCluster cluster, String name, String path, int limit, long sentences, long words,
                            Mode mode, double timeoutS, double perS) throws Exception {
        Config conf = new Config();
        conf.setNumWorkers(1);
        conf.setNumAckers(mode.acking() ? 1 : 0);
        conf.setDebug(false);
        if (mode.maxSpoutPending() != null) {
            conf.setMaxSpoutPending(mode.maxSpoutPending());
        }
        Probe.reset(limit);
        long start = System.nanoTime();
        cluster.submitTopology(name, conf, topology(path, limit, mode.acking(), perS));
        long deadline = start + (long) (timeoutS * 1e9);
        long killed = 0;
        try {
            while (Probe.COUNTED.get() < words
                   || (mode.acking() && Probe.ACKED.get() + Probe.FAILED.get() < sentences)) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException(String.format(
                        "%s: timed out after %.0f s with %d/%d words counted, %d acked, %d failed",
                        name, timeoutS, Probe.COUNTED.get(), words, Probe.ACKED.get(), Probe.FAILED.get()));
                }
                Thread.sleep(5);
            }
        } finally {
            killed = System.nanoTime();
            KillOptions kill = new KillOptions();
            kill.set_wait_secs(0);
            cluster.killTopologyWithOpts(name, kill);
            waitGone(cluster, name, 60);
        }
        if (Probe.COUNTED.get() != words) {
            throw new IllegalStateException(name + ": counted " + Probe.COUNTED.get() + " words, expected " + words);
        }
        double seconds = (Probe.lastNs - Probe.firstNs) / 1e9;
        double startupS = (Probe.firstNs - start) / 1e9;
        double teardownS = (System.nanoTime() - killed) / 1e9;
        double[] latency = mode.acking() ? percentilesMs(Probe.completeNs) : new double[] {Double.NaN, Double.NaN,
            Double.NaN};
        return new double[] {words / seconds, seconds, startupS, teardownS, latency[0], latency[1], latency[2]};
    }

    /** p50, p99 and the maximum of {@code ns}, in ms (nearest rank). */
    static double[] percentilesMs(long[] ns) {
        long[] sorted = ns.clone();
        Arrays.sort(sorted);
        int n = sorted.length;
        return new double[] {sorted[(int) Math.ceil(0.50 * n) - 1] / 1e6, sorted[(int) Math.ceil(0.99 * n) - 1] / 1e6,
            sorted[n - 1] / 1e6};
    }

    /** This process's peak resident memory (VmHWM, Linux), in KiB; -1 where /proc does not say. */
    static long peakRssKiB() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith("VmHWM:")) {
                    return Long.parseLong(line.replaceAll("[^0-9]", ""));
                }
            }
        } catch (IOException | RuntimeException e) {
            // not Linux
        }
        return -1;
    }

    /** Until the killed topology is no longer known to the cluster, so that runs do not overlap. */
    static void waitGone(LocalCluster cluster, String name, double timeoutS) throws Exception {
        long deadline = System.nanoTime() + (long) (timeoutS * 1e9);
        while (cluster.getTopologySummaries().stream().anyMatch(t -> t.get_name().equals(name))) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException(name + " still running " + timeoutS + " s after it was killed");
            }
            Thread.sleep(100);
        }
    }

    static Map<String, String> options(String[] args) {
        Map<String, String> options = new HashMap<>(Map.of(
            "--repeat", "3", "--warmup", "0", "--timeout-s", "300", "--modes", "off,on", "--paced", "0"));
        for (int i = 0; i + 1 < args.length; i += 2) {
            if (!args[i].startsWith("--")) {
                throw new IllegalArgumentException("expected an option, got " + args[i]);
            }
            options.put(args[i], args[i + 1]);
        }
        if (args.length % 2 != 0 || !options.containsKey("--sentences")) {
            throw new IllegalArgumentException("usage: StormWordCountBench --sentences FILE [--repeat N]"
                + " [--warmup SENTENCES] [--timeout-s S] [--modes off,on,on:N] [--paced FRACTION]");
        }
        return options;
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> options = options(args);
        String path = Path.of(options.get("--sentences")).toAbsolutePath().toString();
        int repeat = Integer.parseInt(options.get("--repeat"));
        int warmup = Integer.parseInt(options.get("--warmup"));
        double timeoutS = Double.parseDouble(options.get("--timeout-s"));
        double paced = Double.parseDouble(options.get("--paced"));
        List<Mode> modes = new ArrayList<>();
        for (String spec : options.get("--modes").split(",")) {
            modes.add(Mode.parse(spec.trim()));
        }

        List<String> all = readSentences(path, Integer.MAX_VALUE);
        long sentences = all.size();
        long words = countWords(all);
        System.out.println("STORM_VERSION " + VersionInfo.getVersion());
        System.out.println("JAVA_VERSION " + System.getProperty("java.version") + " ("
            + System.getProperty("java.vm.name") + ")");
        System.out.println("WORKLOAD sentences=" + sentences + " words=" + words);
        System.out.flush();

        // close() of a LocalCluster can linger on ZooKeeper/Curator threads: never let it hold the process.
        long budgetS = (long) (timeoutS * (modes.size() * (repeat + 1) + (paced > 0 ? repeat : 0)) + 120);
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(budgetS * 1000);
                System.err.println("watchdog: benchmark overran " + budgetS + " s, halting");
                Runtime.getRuntime().halt(3);
            } catch (InterruptedException e) {
                // done
            }
        });
        watchdog.setDaemon(true);
        watchdog.start();

        int status = 0;
        long t0 = System.nanoTime();
        try (LocalCluster cluster = new LocalCluster()) {
            System.out.printf(Locale.ROOT, "STARTED cluster_s=%.1f%n", (System.nanoTime() - t0) / 1e9);
            System.out.flush();
            int run = 0;
            if (warmup > 0) { // JIT warm-up of every code path, not reported as a result
                List<String> head = all.subList(0, Math.min(warmup, all.size()));
                for (Mode mode : modes) {
                    String name = "wc-warmup-" + (++run);
                    double[] r = runOnce(cluster, name, path, head.size(), head.size(), countWords(head), mode,
                        timeoutS, 0);
                    // Locale.ROOT in every printf: a decimal point whatever the locale, for the Python side to parse
                    System.out.printf(Locale.ROOT,
                        "WARMUP mode=%s sentences=%d words_per_s=%.0f startup_s=%.1f teardown_s=%.1f%n",
                        mode.name(), head.size(), r[0], r[2], r[3]);
                    System.out.flush();
                }
            }
            Map<Mode, List<Double>> rates = new HashMap<>();
            for (int rep = 1; rep <= repeat; rep++) {
                // The modes in turn, in the reverse order every other round: the drift of a noisy machine, and
                // whatever the mode run first in a round pays for (a collection of the one before), fall on each.
                List<Mode> order = new ArrayList<>(modes);
                if (rep % 2 == 0) {
                    Collections.reverse(order);
                }
                for (Mode mode : order) {
                    String name = "wc-" + (++run);
                    double[] r = runOnce(cluster, name, path, (int) sentences, sentences, words, mode, timeoutS, 0);
                    rates.computeIfAbsent(mode, m -> new ArrayList<>()).add(r[0] * sentences / words);
                    System.out.printf(Locale.ROOT,
                        "RUN mode=%s rep=%d words=%d seconds=%.4f words_per_s=%.0f acked=%d failed=%d"
                        + " startup_s=%.1f teardown_s=%.1f p50_ms=%.3f p99_ms=%.3f max_ms=%.3f%n", mode.name(), rep,
                        words, r[1], r[0], Probe.ACKED.get(), Probe.FAILED.get(), r[2], r[3], r[4], r[5], r[6]);
                    System.out.flush();
                }
            }
            // Latency at a steady rate: the last acking mode given, its spout paced at a fraction of that mode's
            // median sentences/s above, one run a round.
            Mode last = modes.stream().filter(Mode::acking).reduce((a, b) -> b).orElse(null);
            if (paced > 0 && last != null) {
                List<Double> measured = new ArrayList<>(rates.get(last));
                Collections.sort(measured);
                double perS = paced * measured.get(measured.size() / 2);
                for (int rep = 1; rep <= repeat; rep++) {
                    String name = "wc-" + (++run);
                    double[] r = runOnce(cluster, name, path, (int) sentences, sentences, words, last, timeoutS, perS);
                    System.out.printf(Locale.ROOT,
                        "PACED mode=%s rep=%d per_s=%.0f words_per_s=%.0f acked=%d failed=%d"
                        + " p50_ms=%.3f p99_ms=%.3f max_ms=%.3f%n", last.name(), rep, perS, r[0], Probe.ACKED.get(),
                        Probe.FAILED.get(), r[4], r[5], r[6]);
                    System.out.flush();
                }
            }
            System.out.println("MEMORY vmhwm_kib=" + peakRssKiB());
            System.out.println("CLOSING");
            System.out.flush();
        } catch (Exception e) {
            e.printStackTrace();
            status = 1;
        }
        System.out.println("DONE");
        System.out.flush();
        Runtime.getRuntime().halt(status);
    }
}
