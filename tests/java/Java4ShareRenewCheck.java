// The Apache Kafka Java client 4.3 (kafka-clients 4.3.0) renewing share-record locks against a real `tidelog serve`:
// KafkaShareConsumer with share.acknowledgement.mode=explicit and acknowledge(record, AcknowledgeType.RENEW)
// (KIP-1222: ShareFetch / ShareAcknowledge v2). Compiled at test time by tests/java/test_java4_share_renew.py.
//
//   java -cp <jars>:<classes> Java4ShareRenewCheck renew BOOTSTRAP TOPIC GROUP LOCK_MS
//       member "a" polls the topic's first record and keeps it for about 1.8 lock durations: it renews the lock
//       once piggy-backed on a poll (ShareFetch with IsRenewAck) and once with commitSync (ShareAcknowledge), polls
//       the renewed record back each time, then accepts it (commitSync). Member "b" of the same group polls all
//       along (from just after "a" got the record) and accepts what it gets. Finally a record is produced and "b"
//       must get it (it was polling all along).
//   java ... Java4ShareRenewCheck disabled BOOTSTRAP TOPIC GROUP LOCK_MS
//       sets the group config share.renew.acknowledge.enable=false (Admin.incrementalAlterConfigs on the GROUP
//       resource), then member "a" renews its record: commitSync reports the partition's error.
//   java ... Java4ShareRenewCheck record_limit BOOTSTRAP TOPIC GROUP LOCK_MS
//       (KIP-1206) produces 10 records in one batch, then a member with share.acquire.mode=record_limit and
//       max.poll.records=3 accepts them poll by poll: {"event": "polled", "offsets": [...]} per poll.
//
// One JSON object per line on stdout; every wait is bounded; {"event": "error", ...} on a failure.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class Java4ShareRenewCheck {
    static final long T0 = System.nanoTime();

    static synchronized void emit(String event, Object... kv) {
        StringBuilder sb = new StringBuilder("{\"event\": \"").append(event).append('"');
        sb.append(", \"ms\": ").append((System.nanoTime() - T0) / 1_000_000);
        for (int i = 0; i + 1 < kv.length; i += 2) {
            sb.append(", \"").append(kv[i]).append("\": ").append(json(kv[i + 1]));
        }
        System.out.println(sb.append('}'));
        System.out.flush();
    }

    static String json(Object v) {
        if (v == null) return "null";
        if (v instanceof Number || v instanceof Boolean) return v.toString();
        if (v instanceof Collection<?> c) {
            List<String> parts = new ArrayList<>();
            for (Object o : c) parts.add(json(o));
            return "[" + String.join(", ", parts) + "]";
        }
        return "\"" + v.toString().replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ") + "\"";
    }

    static KafkaShareConsumer<String, String> consumer(String bootstrap, String group, String name) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "renew-" + name);
        p.put("share.acknowledgement.mode", "explicit");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "1");
        return new KafkaShareConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }

    /** Polls (at most {@code seconds}) until a record comes; null if none did. */
    static ConsumerRecord<String, String> pollOne(KafkaShareConsumer<String, String> c, double seconds) {
        long deadline = System.nanoTime() + (long) (seconds * 1e9);
        while (System.nanoTime() < deadline) {
            ConsumerRecords<String, String> rs = c.poll(Duration.ofMillis(100));
            for (ConsumerRecord<String, String> r : rs) return r;
        }
        return null;
    }

    static List<Object> errors(Map<TopicIdPartition, Optional<KafkaException>> res) {
        List<Object> out = new ArrayList<>();
        for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : res.entrySet()) {
            e.getValue().ifPresent(x -> out.add(x.getClass().getSimpleName()));
        }
        return out;
    }

    static int count(ConsumerRecord<String, String> r) {
        return r.deliveryCount().map(Short::intValue).orElse(-1);
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1], topic = args[2], group = args[3];
        long lockMs = Long.parseLong(args[4]);
        try {
            if (mode.equals("renew")) renew(bootstrap, topic, group, lockMs);
            else if (mode.equals("record_limit")) recordLimit(bootstrap, topic, group);
            else disabled(bootstrap, topic, group);
        } catch (Throwable e) {
            emit("error", "error", e.getClass().getSimpleName(), "message", String.valueOf(e.getMessage()));
        }
        emit("done");
    }

    static void renew(String bootstrap, String topic, String group, long lockMs) throws Exception {
        AtomicBoolean stop = new AtomicBoolean();
        List<Long> bGot = new ArrayList<>();
        try (KafkaShareConsumer<String, String> a = consumer(bootstrap, group, "a")) {
            a.subscribe(List.of(topic));
            ConsumerRecord<String, String> r = pollOne(a, 30);
            if (r == null) throw new AssertionError("a got no record in 30 s");
            long got = System.nanoTime();
            emit("acquired", "offset", r.offset(), "count", count(r), "lock_ms", a.acquisitionLockTimeoutMs().orElse(-1));

            Thread b = new Thread(() -> {
                try (KafkaShareConsumer<String, String> c = consumer(bootstrap, group, "b")) {
                    c.subscribe(List.of(topic));
                    emit("b_polling");
                    while (!stop.get()) {
                        for (ConsumerRecord<String, String> x : c.poll(Duration.ofMillis(100))) {
                            emit("b_delivered", "offset", x.offset(), "value", x.value(), "count", count(x));
                            synchronized (bGot) { bGot.add(x.offset()); }
                            c.acknowledge(x, AcknowledgeType.ACCEPT);
                            c.commitSync(Duration.ofSeconds(15));
                        }
                    }
                } catch (Throwable e) {
                    emit("error", "who", "b", "error", e.getClass().getSimpleName(), "message", String.valueOf(e.getMessage()));
                }
            });
            b.start();

            // renewal 1: piggy-backed on the next poll (ShareFetch v2 with IsRenewAck)
            Thread.sleep(lockMs * 6 / 10);
            a.acknowledge(r, AcknowledgeType.RENEW);
            ConsumerRecord<String, String> back = pollOne(a, lockMs / 1000.0 * 0.3 + 5);
            emit("renewed", "how", "poll", "back_offset", back == null ? -1 : back.offset(),
                    "count", back == null ? -1 : count(back));
            if (back == null) throw new AssertionError("the renewed record did not come back on a poll");

            // renewal 2: commitSync (ShareAcknowledge v2 with IsRenewAck)
            Thread.sleep(lockMs * 6 / 10);
            a.acknowledge(back, AcknowledgeType.RENEW);
            Map<TopicIdPartition, Optional<KafkaException>> res = a.commitSync(Duration.ofSeconds(15));
            emit("renewed", "how", "commit", "errors", errors(res), "partitions", res.size());
            ConsumerRecord<String, String> again = pollOne(a, lockMs / 1000.0 * 0.3 + 5);
            emit("back", "offset", again == null ? -1 : again.offset(), "count", again == null ? -1 : count(again));
            if (again == null) throw new AssertionError("the renewed record did not come back after commitSync");

            Thread.sleep(lockMs * 6 / 10);
            a.acknowledge(again, AcknowledgeType.ACCEPT);
            res = a.commitSync(Duration.ofSeconds(15));
            emit("accepted", "offset", again.offset(), "held_ms", (System.nanoTime() - got) / 1_000_000,
                    "errors", errors(res), "partitions", res.size());

            Properties pp = new Properties();
            pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            try (KafkaProducer<String, String> p = new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
                p.send(new ProducerRecord<>(topic, 0, null, "after")).get();
            }
            long deadline = System.nanoTime() + 20_000_000_000L;
            while (System.nanoTime() < deadline) {
                synchronized (bGot) { if (bGot.contains(r.offset() + 1)) break; }
                Thread.sleep(50);
            }
            stop.set(true);
            b.join(20_000);
        } finally {
            stop.set(true);
        }
    }

    static void disabled(String bootstrap, String topic, String group) throws Exception {
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(ap)) {
            ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
            admin.incrementalAlterConfigs(Map.of(res, List.of(new AlterConfigOp(
                    new ConfigEntry("share.renew.acknowledge.enable", "false"), AlterConfigOp.OpType.SET))))
                    .all().get();
            ConfigEntry e = admin.describeConfigs(List.of(res)).all().get().get(res)
                    .get("share.renew.acknowledge.enable");
            emit("config", "value", e.value(), "type", String.valueOf(e.type()));
        }
        try (KafkaShareConsumer<String, String> a = consumer(bootstrap, group, "a")) {
            a.subscribe(List.of(topic));
            ConsumerRecord<String, String> r = pollOne(a, 30);
            if (r == null) throw new AssertionError("a got no record in 30 s");
            a.acknowledge(r, AcknowledgeType.RENEW);
            Map<TopicIdPartition, Optional<KafkaException>> res = a.commitSync(Duration.ofSeconds(15));
            emit("renewed", "how", "commit", "errors", errors(res), "partitions", res.size());
        }
    }

    static void recordLimit(String bootstrap, String topic, String group) throws Exception {
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "1000");  // the 10 records in one batch
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
            List<java.util.concurrent.Future<?>> sent = new ArrayList<>();
            for (int i = 0; i < 10; i++) sent.add(p.send(new ProducerRecord<>(topic, 0, null, "r" + i)));
            p.flush();
            for (java.util.concurrent.Future<?> f : sent) f.get();
        }
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put("share.acknowledgement.mode", "explicit");
        p.put("share.acquire.mode", "record_limit");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "3");
        try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p, new StringDeserializer(),
                new StringDeserializer())) {
            c.subscribe(List.of(topic));
            int got = 0;
            long deadline = System.nanoTime() + 30_000_000_000L;
            while (got < 10 && System.nanoTime() < deadline) {
                ConsumerRecords<String, String> rs = c.poll(Duration.ofMillis(200));
                if (rs.isEmpty()) continue;
                List<Object> offsets = new ArrayList<>();
                for (ConsumerRecord<String, String> r : rs) {
                    offsets.add(r.offset());
                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                }
                Map<TopicIdPartition, Optional<KafkaException>> res = c.commitSync(Duration.ofSeconds(15));
                emit("polled", "offsets", offsets, "errors", errors(res));
                got += offsets.size();
            }
        }
    }
}
