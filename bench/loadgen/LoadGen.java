// tidelog broker benchmark load generator: a small native (JVM) Kafka producer/consumer on kafka-clients.
// Written for tidelog's bench/ harness; compiled at run time into bench/.work/ by bench/broker_bench.py.
//
//   java -cp <kafka-clients + deps>:<classes> LoadGen produce --bootstrap H:P --topic T --size B --acks A
//        [--count N] [--duration S] [--rate MSGS_PER_S] [--linger-ms L] [--batch-size B] [--idempotence true]
//   java ... LoadGen consume --bootstrap H:P --topic T --count N [--timeout S]
//
// Prints exactly one JSON object on stdout (last line) with the result; everything else goes to stderr.

import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class LoadGen {

    private static Map<String, String> parseArgs(String[] args, int from) {
        Map<String, String> out = new HashMap<>();
        for (int i = from; i < args.length; i++) {
            String a = args[i];
            if (!a.startsWith("--")) throw new IllegalArgumentException("unexpected argument: " + a);
            if (i + 1 >= args.length) throw new IllegalArgumentException("missing value for " + a);
            out.put(a.substring(2), args[++i]);
        }
        return out;
    }

    private static long cpuNanos() {
        java.lang.management.OperatingSystemMXBean os = ManagementFactory.getOperatingSystemMXBean();
        if (os instanceof com.sun.management.OperatingSystemMXBean sun) return sun.getProcessCpuTime();
        return -1;
    }

    /** Latency samples in microseconds; a fixed-size array filled from producer callbacks (one I/O thread). */
    private static final class Latencies {
        final long[] us;
        int n;

        Latencies(int capacity) { us = new long[capacity]; }

        synchronized void add(long v) { if (n < us.length) us[n++] = v; }

        synchronized double pct(double p) {
            if (n == 0) return -1;
            long[] s = Arrays.copyOf(us, n);
            Arrays.sort(s);
            int idx = (int) Math.ceil(p / 100.0 * n) - 1;
            return s[Math.max(0, Math.min(n - 1, idx))] / 1000.0;
        }
    }

    private static String json(Map<String, Object> m) {
        StringBuilder sb = new StringBuilder("{");
        boolean first = true;
        for (Map.Entry<String, Object> e : m.entrySet()) {
            if (!first) sb.append(", ");
            first = false;
            sb.append('"').append(e.getKey()).append("\": ");
            Object v = e.getValue();
            if (v instanceof String s) sb.append('"').append(s.replace("\\", "\\\\").replace("\"", "\\\"")).append('"');
            else sb.append(v);
        }
        return sb.append('}').toString();
    }

    static int produce(Map<String, String> a) throws Exception {
        String bootstrap = a.get("bootstrap");
        String topic = a.get("topic");
        int size = Integer.parseInt(a.getOrDefault("size", "100"));
        String acks = a.getOrDefault("acks", "1");
        long count = Long.parseLong(a.getOrDefault("count", "0"));
        double duration = Double.parseDouble(a.getOrDefault("duration", "0"));
        double rate = Double.parseDouble(a.getOrDefault("rate", "0"));
        if (count <= 0 && duration <= 0) throw new IllegalArgumentException("need --count or --duration");

        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, acks);
        p.put(ProducerConfig.LINGER_MS_CONFIG, a.getOrDefault("linger-ms", "5"));
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, a.getOrDefault("batch-size", "65536"));
        p.put(ProducerConfig.BUFFER_MEMORY_CONFIG, String.valueOf(64L << 20));
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "none");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, a.getOrDefault("idempotence", "false"));
        p.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "5");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "30000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "tidelog-bench-producer");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());

        byte[] payload = new byte[size];
        new Random(42).nextBytes(payload);
        Latencies lat = new Latencies(4_000_000);
        AtomicLong acked = new AtomicLong();
        AtomicLong errors = new AtomicLong();
        AtomicLong lastError = new AtomicLong();
        final String[] firstError = {null};

        long sent = 0;
        long cpu0 = cpuNanos();
        long t0;
        long tEnd;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            // Warm up metadata so the timed section does not include the first metadata round trip.
            List<PartitionInfo> parts = producer.partitionsFor(topic);
            System.err.println("producer: topic " + topic + " has " + parts.size() + " partition(s)");
            t0 = System.nanoTime();
            long deadline = duration > 0 ? t0 + (long) (duration * 1e9) : Long.MAX_VALUE;
            double intervalNs = rate > 0 ? 1e9 / rate : 0;
            while ((count <= 0 || sent < count)) {
                long now = System.nanoTime();
                if (now >= deadline) break;
                if (intervalNs > 0) {
                    long due = t0 + (long) (sent * intervalNs);
                    while ((now = System.nanoTime()) < due) {
                        long wait = due - now;
                        if (wait > 200_000) LockSupport.parkNanos(wait - 100_000);
                        else Thread.onSpinWait();
                    }
                }
                final long start = System.nanoTime();
                producer.send(new ProducerRecord<>(topic, null, payload), (md, ex) -> {
                    if (ex != null) {
                        if (errors.incrementAndGet() == 1) firstError[0] = ex.toString();
                        lastError.set(System.nanoTime());
                    } else {
                        acked.incrementAndGet();
                        lat.add((System.nanoTime() - start) / 1000);
                    }
                });
                sent++;
            }
            producer.flush();
            tEnd = System.nanoTime();
        }
        long cpu1 = cpuNanos();
        double secs = (tEnd - t0) / 1e9;
        Map<String, Object> r = new java.util.LinkedHashMap<>();
        r.put("mode", "produce");
        r.put("size", size);
        r.put("acks", acks);
        r.put("rate_target", rate);
        r.put("sent", sent);
        r.put("acked", acked.get());
        r.put("errors", errors.get());
        r.put("seconds", secs);
        r.put("msgs_per_s", acked.get() / secs);
        r.put("mb_per_s", acked.get() * (double) size / secs / 1e6);
        r.put("p50_ms", lat.pct(50));
        r.put("p99_ms", lat.pct(99));
        r.put("p999_ms", lat.pct(99.9));
        r.put("max_ms", lat.pct(100));
        r.put("cpu_s", cpu0 >= 0 ? (cpu1 - cpu0) / 1e9 : -1);
        if (firstError[0] != null) r.put("first_error", firstError[0]);
        System.out.println(json(r));
        return errors.get() == 0 ? 0 : 3;
    }

    static int consume(Map<String, String> a) throws Exception {
        String bootstrap = a.get("bootstrap");
        String topic = a.get("topic");
        long count = Long.parseLong(a.getOrDefault("count", "0"));
        double timeout = Double.parseDouble(a.getOrDefault("timeout", "60"));
        double idle = Double.parseDouble(a.getOrDefault("idle", "5"));

        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "tidelog-bench-consumer");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10000");
        p.put(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, String.valueOf(50 << 20));
        p.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, String.valueOf(4 << 20));
        p.put(ConsumerConfig.CHECK_CRCS_CONFIG, "true");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());

        long n = 0;
        long bytes = 0;
        long cpu0 = cpuNanos();
        long t0;
        long tLast;
        int nParts;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            List<PartitionInfo> parts = consumer.partitionsFor(topic, Duration.ofSeconds(30));
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : parts) tps.add(new TopicPartition(topic, pi.partition()));
            nParts = tps.size();
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            t0 = System.nanoTime();
            tLast = t0;
            long deadline = t0 + (long) (timeout * 1e9);
            while (n < count) {
                long now = System.nanoTime();
                if (now > deadline) break;
                if (n > 0 && now - tLast > (long) (idle * 1e9)) break;
                ConsumerRecords<byte[], byte[]> recs = consumer.poll(Duration.ofMillis(200));
                if (recs.isEmpty()) continue;
                for (ConsumerRecord<byte[], byte[]> rec : recs) {
                    n++;
                    byte[] v = rec.value();
                    if (v != null) bytes += v.length;
                }
                tLast = System.nanoTime();
            }
        }
        long cpu1 = cpuNanos();
        double secs = Math.max(1e-9, (tLast - t0) / 1e9);
        Map<String, Object> r = new java.util.LinkedHashMap<>();
        r.put("mode", "consume");
        r.put("partitions", nParts);
        r.put("expected", count);
        r.put("received", n);
        r.put("bytes", bytes);
        r.put("seconds", secs);
        r.put("msgs_per_s", n / secs);
        r.put("mb_per_s", bytes / secs / 1e6);
        r.put("cpu_s", cpu0 >= 0 ? (cpu1 - cpu0) / 1e9 : -1);
        System.out.println(json(r));
        return n >= count ? 0 : 3;
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: LoadGen produce|consume --bootstrap H:P --topic T ...");
            System.exit(2);
        }
        Map<String, String> a = parseArgs(args, 1);
        int rc = switch (args[0]) {
            case "produce" -> produce(a);
            case "consume" -> consume(a);
            default -> {
                System.err.println("unknown mode " + args[0]);
                yield 2;
            }
        };
        System.out.flush();
        System.exit(rc);
    }
}
