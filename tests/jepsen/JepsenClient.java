// The Java (kafka-clients) clients of the Jepsen-style runs: a queue producer or a queue consumer that prints the
// history events of tests/jepsen/HISTORY.md as JSON lines on stdout; tests/jepsen/javaclient.py records them through
// the run's History (it maps this program's local process numbers to fresh history process ids and stamps the time).
//
//   java -cp <jars>:<classes> JepsenClient producer BOOTSTRAP TOPIC PARTITIONS WORKERS VALUE_BASE ACKS
//   java -cp <jars>:<classes> JepsenClient consumer BOOTSTRAP TOPIC PARTITIONS GROUP MODE ISOLATION
//
// Line format: {"p": local process, "type": invoke|ok|fail|info, "f": op, "value": ..., "error": ...}. The program
// stops (finishing the op in flight) when its stdin reaches EOF, then prints {"done": true}. Outcomes follow the
// confluent-kafka clients of workloads.py: a send is ok when its future gives the offset, info on any error (its
// producer is then replaced, with a new process); a commit is ok, fail when the group rejected it
// (CommitFailedException, RebalanceInProgressException), else info (the consumer is replaced).
// Compiled with tests/java/TestKit.java (the JSON output and client settings the Java test clients share).

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Future;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class JepsenClient {
    static final AtomicBoolean STOP = new AtomicBoolean(false);
    static final AtomicInteger PIDS = new AtomicInteger();
    static final Map<Integer, Semaphore> GO = new ConcurrentHashMap<>();

    /** Released by the runner ("g PID" on stdin) once it has recorded PID's invoke: a send starts only then, so
     *  no reader (another JVM, another pipe) can have its record in the history before the invoke. */
    static Semaphore go(int pid) {
        return GO.computeIfAbsent(pid, x -> new Semaphore(0));
    }

    /** Reads the runner's commands from stdin on a daemon thread: "g PID" releases {@link #go}, any other line goes
     *  to {@code other}; at EOF (or a read error) {@link #STOP} is set. */
    static void readStdin(java.util.function.Consumer<String> other) {
        Thread stdin = new Thread(() -> {
            try {
                BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
                String line;
                while ((line = in.readLine()) != null) {
                    if (line.startsWith("g ")) go(Integer.parseInt(line.substring(2).trim())).release();
                    else other.accept(line);
                }
            } catch (Exception e) {
                // treated as EOF
            }
            STOP.set(true);
        }, "stdin");
        stdin.setDaemon(true);
        stdin.start();
    }

    public static void main(String[] args) throws Exception {
        readStdin(line -> { });
        List<Thread> threads = new ArrayList<>();
        if (args[0].equals("producer")) {
            String bootstrap = args[1], topic = args[2], acks = args[6];
            int partitions = Integer.parseInt(args[3]), workers = Integer.parseInt(args[4]);
            AtomicLong values = new AtomicLong(Long.parseLong(args[5]));
            for (int w = 0; w < workers; w++) {
                long seed = Long.parseLong(args[5]) + w;
                threads.add(new Thread(() -> produce(bootstrap, topic, partitions, acks, values, seed), "producer-" + w));
            }
        } else {
            String bootstrap = args[1], topic = args[2], group = args[4], mode = args[5], isolation = args[6];
            int partitions = Integer.parseInt(args[3]);
            threads.add(new Thread(() -> {
                while (!STOP.get()) consumeSession(bootstrap, topic, partitions, group, mode, isolation);
            }, "consumer"));
        }
        for (Thread t : threads) t.start();
        for (Thread t : threads) t.join();
        TestKit.println("{\"done\":true}");
        System.exit(0);
    }

    // ------------------------------------------------------------------------------------------------ producer

    static Properties common(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        // request.timeout.ms bounds the wait on a request in flight to a frozen broker (then the client
        // disconnects, refreshes its metadata and retries with the new leader)
        p.put("request.timeout.ms", "10000");
        p.put("metadata.max.age.ms", "5000");
        p.put("reconnect.backoff.max.ms", "1000");
        return p;
    }

    static KafkaProducer<String, String> producer(String bootstrap, String acks) {
        Properties p = TestKit.delivery(common(bootstrap), acks, 5, 60000, 30000);
        p.put(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, "200");
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static int open(String role, String isolation, String mode, String group) {
        int pid = PIDS.getAndIncrement();
        String v = "{\"role\":\"" + role + "\",\"client\":\"java\",\"transactional\":false,\"isolation\":\""
                + isolation + "\",\"mode\":" + TestKit.str(mode) + ",\"group\":" + TestKit.str(group) + "}";
        emit(pid, "invoke", "open", v, null);
        emit(pid, "ok", "open", v, null);
        return pid;
    }

    static void produce(String bootstrap, String topic, int partitions, String acks, AtomicLong values, long seed) {
        Random rng = new Random(seed);
        KafkaProducer<String, String> prod = producer(bootstrap, acks);
        int pid = open("producer", "read_uncommitted", null, null);
        while (!STOP.get()) {
            int part = rng.nextInt(partitions);
            String k = TestKit.str(topic + "/" + part);
            long value = values.getAndIncrement();
            String op = "[[\"send\"," + k + "," + value + "]]";
            emit(pid, "invoke", "send", op, null);
            try {
                while (!go(pid).tryAcquire(1, TimeUnit.SECONDS)) {
                    if (STOP.get()) {  // the runner is gone: the send never started
                        emit(pid, "fail", "send", op, "stopped before the send");
                        prod.close(Duration.ofSeconds(5));
                        return;
                    }
                }
            } catch (InterruptedException e) {
                return;
            }
            Future<RecordMetadata> fut;
            try {
                fut = prod.send(new ProducerRecord<>(topic, part, Long.toString(value), Long.toString(value)));
            } catch (Exception e) {  // not handed to the accumulator: definitely not sent
                emit(pid, "fail", "send", op, e.toString());
                continue;
            }
            String error;
            try {
                RecordMetadata md = fut.get(75, TimeUnit.SECONDS);
                String off = md.hasOffset() && md.offset() >= 0 ? Long.toString(md.offset()) : "null";
                emit(pid, "ok", "send", "[[\"send\"," + k + ",[" + off + "," + value + "]]]", null);
                continue;
            } catch (java.util.concurrent.ExecutionException e) {
                error = String.valueOf(e.getCause());
            } catch (java.util.concurrent.TimeoutException e) {
                error = "no delivery report";
            } catch (InterruptedException e) {
                error = "interrupted";
            }
            emit(pid, "info", "send", op, error);
            KafkaProducer<String, String> old = prod;
            Thread closer = new Thread(() -> old.close(Duration.ofSeconds(5)));
            closer.setDaemon(true);
            closer.start();
            prod = producer(bootstrap, acks);
            pid = open("producer", "read_uncommitted", null, null);
        }
        prod.close(Duration.ofSeconds(10));
    }

    // ------------------------------------------------------------------------------------------------ consumer

    static void consumeSession(String bootstrap, String topic, int partitions, String group, String mode,
                               String isolation) {
        int pid = open("consumer", isolation, mode, group);
        Properties p = TestKit.manualCommit(common(bootstrap), group, isolation);
        p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
        p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
        p.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, "120000");
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "200");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "15000");
        KafkaConsumer<String, String> c = new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
        boolean[] pollOpen = {false};
        try {
            List<TopicPartition> parts = new ArrayList<>();
            for (int i = 0; i < partitions; i++) parts.add(new TopicPartition(topic, i));
            if (mode.equals("assign")) {
                Map<String, Long> pos = committed(c, parts);
                c.assign(parts);
                for (TopicPartition tp : parts) {
                    Long o = pos.get(tp.topic() + "/" + tp.partition());
                    if (o == null) c.seekToBeginning(List.of(tp));
                    else c.seek(tp, o);
                }
                assigned(pid, pos, false);
            } else {
                c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                    public void onPartitionsRevoked(Collection<TopicPartition> tps) {
                        assigned(pid, new TreeMap<>(), pollOpen[0]);
                    }

                    public void onPartitionsAssigned(Collection<TopicPartition> tps) {
                        assigned(pid, committed(c, new ArrayList<>(tps)), pollOpen[0]);
                    }
                });
            }
            Map<TopicPartition, OffsetAndMetadata> consumed = new HashMap<>();
            int polls = 0;
            boolean dirty = false;
            while (!STOP.get()) {
                emit(pid, "invoke", "poll", "[[\"poll\"]]", null);
                pollOpen[0] = true;
                ConsumerRecords<String, String> recs = c.poll(Duration.ofSeconds(1));
                pollOpen[0] = false;
                Map<String, StringBuilder> byKey = new TreeMap<>();
                for (ConsumerRecord<String, String> r : recs) {
                    String k = r.topic() + "/" + r.partition();
                    StringBuilder sb = byKey.computeIfAbsent(k, x -> new StringBuilder());
                    if (sb.length() > 0) sb.append(',');
                    sb.append('[').append(r.offset()).append(',').append(Long.parseLong(r.value())).append(']');
                    consumed.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    dirty = true;
                }
                emit(pid, "ok", "poll", "[[\"poll\"," + recMap(byKey) + "]]", null);
                polls++;
                if (polls % 4 == 0 && dirty) {
                    dirty = false;
                    Set<TopicPartition> mine = c.assignment();
                    Map<TopicPartition, OffsetAndMetadata> offs = new HashMap<>();
                    for (Map.Entry<TopicPartition, OffsetAndMetadata> e : consumed.entrySet())
                        if (mine.contains(e.getKey())) offs.put(e.getKey(), e.getValue());
                    if (!offs.isEmpty() && !commit(c, pid, group, offs)) return;
                }
            }
        } catch (Exception e) {  // the consumer failed: its open op (if any) has an unknown outcome
            if (pollOpen[0]) emit(pid, "info", "poll", "[[\"poll\"]]", e.toString());
        } finally {
            try {
                c.close(Duration.ofSeconds(5));
            } catch (Exception e) {
                // replaced anyway
            }
        }
    }

    static Map<String, Long> committed(KafkaConsumer<String, String> c, List<TopicPartition> tps) {
        Map<String, Long> out = new TreeMap<>();
        try {
            Map<TopicPartition, OffsetAndMetadata> got = c.committed(new HashSet<>(tps), Duration.ofSeconds(15));
            for (TopicPartition tp : tps) {
                OffsetAndMetadata o = got.get(tp);
                out.put(tp.topic() + "/" + tp.partition(), o == null ? null : o.offset());
            }
        } catch (Exception e) {  // could not ask: null (not judged by the checker)
            for (TopicPartition tp : tps) out.put(tp.topic() + "/" + tp.partition(), null);
        }
        return out;
    }

    /** A (new) assignment, written inside an open poll as workloads.py does: complete it, assign, reopen. */
    static void assigned(int pid, Map<String, Long> positions, boolean inPoll) {
        if (inPoll) emit(pid, "ok", "poll", "[[\"poll\",{}]]", null);
        StringBuilder parts = new StringBuilder("[");
        StringBuilder pos = new StringBuilder("{");
        for (Map.Entry<String, Long> e : positions.entrySet()) {
            if (parts.length() > 1) {
                parts.append(',');
                pos.append(',');
            }
            parts.append(TestKit.str(e.getKey()));
            pos.append(TestKit.str(e.getKey())).append(':').append(e.getValue() == null ? "null" : e.getValue().toString());
        }
        parts.append(']');
        pos.append('}');
        emit(pid, "invoke", "assign", "{\"partitions\":" + parts + ",\"positions\":{}}", null);
        emit(pid, "ok", "assign", "{\"partitions\":" + parts + ",\"positions\":" + pos + "}", null);
        if (inPoll) emit(pid, "invoke", "poll", "[[\"poll\"]]", null);
    }

    static boolean commit(KafkaConsumer<String, String> c, int pid, String group,
                          Map<TopicPartition, OffsetAndMetadata> offs) {
        StringBuilder sb = new StringBuilder("{");
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : new TreeMap<String, Map.Entry<TopicPartition,
                OffsetAndMetadata>>(keyed(offs)).values()) {
            if (sb.length() > 1) sb.append(',');
            sb.append(TestKit.str(e.getKey().topic() + "/" + e.getKey().partition())).append(':').append(e.getValue().offset());
        }
        sb.append('}');
        String v = "{\"group\":" + TestKit.str(group) + ",\"offsets\":" + sb + "}";
        emit(pid, "invoke", "commit-offsets", v, null);
        try {
            c.commitSync(offs, Duration.ofSeconds(15));
            emit(pid, "ok", "commit-offsets", v, null);
            return true;
        } catch (CommitFailedException | RebalanceInProgressException e) {
            emit(pid, "fail", "commit-offsets", v, e.toString());
            return true;
        } catch (Exception e) {
            emit(pid, "info", "commit-offsets", v, e.toString());
            return false;
        }
    }

    static Map<String, Map.Entry<TopicPartition, OffsetAndMetadata>> keyed(Map<TopicPartition, OffsetAndMetadata> m) {
        Map<String, Map.Entry<TopicPartition, OffsetAndMetadata>> out = new HashMap<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : m.entrySet())
            out.put(e.getKey().topic() + "/" + e.getKey().partition(), e);
        return out;
    }

    // ------------------------------------------------------------------------------------------------ output

    static String recMap(Map<String, StringBuilder> byKey) {
        StringBuilder sb = new StringBuilder("{");
        for (Map.Entry<String, StringBuilder> e : byKey.entrySet()) {
            if (sb.length() > 1) sb.append(',');
            sb.append(TestKit.str(e.getKey())).append(":[").append(e.getValue()).append(']');
        }
        return sb.append('}').toString();
    }

    static void emit(int pid, String type, String f, String valueJson, String error) {
        String line = "{\"p\":" + pid + ",\"type\":\"" + type + "\",\"f\":\"" + f + "\",\"value\":" + valueJson
                + (error == null ? "" : ",\"error\":" + TestKit.str(error)) + "}";
        TestKit.println(line);
    }
}
