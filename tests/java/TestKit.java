// What the Java test clients share: tests/java/JavaClientCheck.java and Java4GroupsCheck.java,
// tests/jepsen/JepsenClient.java and JepsenTxnClient.java. Compiled together with each of them (tests/java/conftest.py,
// tests/java/jars4.py's compile4, tests/jepsen/javaclient.py), against kafka-clients 3.9 or 4.3, so it uses only what
// both have: JSON lines on stdout (the programs' reports, read by the Python tests), the client settings the programs
// have in common, and an Admin call two of them make.

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.TopicPartitionInfo;

final class TestKit {
    private TestKit() {
    }

    // ------------------------------------------------------------------------------------------------ JSON out

    /** An ordered JSON object from key, value, key, value, ... */
    static Map<String, Object> obj(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        return m;
    }

    /** One line on stdout, whole (the programs print from several threads), flushed. */
    static synchronized void println(String line) {
        System.out.println(line);
        System.out.flush();
    }

    /** {@code v} (null, a boolean, an integer, an Optional, a Map, an Iterable, else its text) as one JSON line. */
    static void emit(Object v) {
        StringBuilder sb = new StringBuilder();
        json(sb, v);
        println(sb.toString());
    }

    static void json(StringBuilder sb, Object v) {
        if (v == null) {
            sb.append("null");
        } else if (v instanceof Boolean || v instanceof Integer || v instanceof Long || v instanceof Short) {
            sb.append(v);
        } else if (v instanceof Optional<?> o) {
            json(sb, o.orElse(null));
        } else if (v instanceof Map<?, ?> m) {
            sb.append('{');
            boolean firstItem = true;
            for (var e : m.entrySet()) {
                if (!firstItem) sb.append(',');
                firstItem = false;
                string(sb, String.valueOf(e.getKey()));
                sb.append(':');
                json(sb, e.getValue());
            }
            sb.append('}');
        } else if (v instanceof Iterable<?> it) {
            sb.append('[');
            boolean firstItem = true;
            for (Object x : it) {
                if (!firstItem) sb.append(',');
                firstItem = false;
                json(sb, x);
            }
            sb.append(']');
        } else {
            string(sb, v.toString());
        }
    }

    /** {@code s} as a JSON string (non-ASCII as \\u escapes), or {@code null}. */
    static String str(String s) {
        if (s == null) return "null";
        StringBuilder sb = new StringBuilder(s.length() + 2);
        string(sb, s);
        return sb.toString();
    }

    static void string(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char ch = s.charAt(i);
            switch (ch) {
                case '"' -> sb.append("\\\"");
                case '\\' -> sb.append("\\\\");
                case '\n' -> sb.append("\\n");
                case '\r' -> sb.append("\\r");
                case '\t' -> sb.append("\\t");
                default -> {
                    if (ch < 0x20 || ch > 0x7e) sb.append(String.format("\\u%04x", (int) ch));
                    else sb.append(ch);
                }
            }
        }
        sb.append('"');
    }

    // ------------------------------------------------------------------------------------------------ admin

    /** Admin.describeTopics of one topic in pages of {@code limit} partitions (DescribeTopicPartitions, API 75,
     *  as kafka-topics.sh --describe pages it): event "described" with each partition's leader and the sizes of its
     *  replica set, ISR and ELR. */
    static Map<String, Object> describedPaged(Admin admin, String topic, int limit) throws Exception {
        TopicDescription d = admin.describeTopics(List.of(topic),
                new DescribeTopicsOptions().partitionSizeLimitPerResponse(limit)).allTopicNames().get().get(topic);
        List<Object> parts = new ArrayList<>();
        for (TopicPartitionInfo p : d.partitions()) {
            parts.add(obj("partition", p.partition(), "leader", p.leader() == null ? null : p.leader().id(),
                    "replicas", p.replicas().size(), "isr", p.isr().size(),
                    "elr", p.elr() == null ? null : p.elr().size()));
        }
        return obj("event", "described", "name", d.name(), "topic_id", String.valueOf(d.topicId()), "partitions", parts);
    }

    // ------------------------------------------------------------------------------------------ client settings

    /** A producer's delivery settings: {@code acks}, idempotence exactly when acks is "all", the linger, the
     *  delivery timeout and how long send() may block (on metadata or a full buffer). */
    static Properties delivery(Properties p, String acks, int lingerMs, int deliveryTimeoutMs, int maxBlockMs) {
        p.put(ProducerConfig.ACKS_CONFIG, acks);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, String.valueOf(acks.equals("all")));
        p.put(ProducerConfig.LINGER_MS_CONFIG, String.valueOf(lingerMs));
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, String.valueOf(deliveryTimeoutMs));
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, String.valueOf(maxBlockMs));
        return p;
    }

    /** A consumer that commits by hand and starts at the earliest offset where its group has none: in
     *  {@code group} unless null, reading with {@code isolation} unless null (the client's default,
     *  read_uncommitted). */
    static Properties manualCommit(Properties p, String group, String isolation) {
        if (group != null) p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        if (isolation != null) p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        return p;
    }
}
