// Drives a real `tidelog serve` with the Apache Kafka Java client 4.3 (kafka-clients 4.3.0): KIP-848 consumer groups,
// the online upgrade of a classic group, KIP-932 share consumers and Admin.describeTopics (DescribeTopicPartitions).
// Compiled at test time by tests/java/test_java4_groups.py (tests/java/jars4.py: javac against the 4.3 jars).
//
//   java -cp <jars>:<classes> Java4GroupsCheck members BOOTSTRAP TOPIC GROUP
//       one KafkaConsumer per member, each in its own thread; commands on stdin, one a line:
//         join NAME classic|consumer     a member with that group.protocol subscribes to TOPIC
//         close NAME                     close() (a leave)
//         exit                           close every member, then {"event": "done"}
//       A member commits each poll's records (commitSync of the batch's offsets) before polling again and reports
//       {"event": "batch", ...} before and {"event": "committed", ...} after the commit (or "commit_failed", after
//       which it seeks back so the records come again). auto-commit off, auto.offset.reset earliest.
//   java ... Java4GroupsCheck share BOOTSTRAP TOPIC GROUP
//       KafkaShareConsumers (share.acknowledgement.mode=explicit, max.poll.records 10); commands on stdin:
//         join NAME accept|hold          accept: acknowledges every record ACCEPT, except values starting with
//                                        "poison" (RELEASE), then commitSync(); hold: acknowledges nothing and
//                                        polls no more once it got records (it is meant to be killed -9)
//         close NAME / exit              as above
//   java ... Java4GroupsCheck describe_group BOOTSTRAP GROUP     Admin.describeConsumerGroups
//   java ... Java4GroupsCheck describe_share_group BOOTSTRAP GROUP     Admin.describeShareGroups
//   java ... Java4GroupsCheck describe_topics BOOTSTRAP TOPIC LIMIT
//       Admin.describeTopics with partitionSizeLimitPerResponse(LIMIT) (DescribeTopicPartitions pages)
//
// Every observation is one JSON object per line on stdout; the pytest side asserts on them. Errors are reported as
// {"event": "error", ...}. Every wait is bounded.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class Java4GroupsCheck {
    static String bootstrap, topic, group;
    static final Map<String, Member> MEMBERS = new ConcurrentHashMap<>();

    public static void main(String[] args) throws Exception {
        try {
            switch (args[0]) {
                case "members", "share" -> {
                    bootstrap = args[1];
                    topic = args[2];
                    group = args[3];
                    commands(args[0].equals("share"));
                }
                case "describe_group" -> describeGroup(args[1], args[2]);
                case "describe_share_group" -> describeShareGroup(args[1], args[2]);
                case "describe_topics" -> describeTopics(args[1], args[2], Integer.parseInt(args[3]));
                default -> throw new IllegalArgumentException("unknown scenario " + args[0]);
            }
            emit(obj("event", "done"));
        } catch (Throwable e) {
            emit(obj("event", "error", "error", e.getClass().getSimpleName(), "message", String.valueOf(e.getMessage())));
            System.exit(1);
        }
        System.exit(0);  // no lingering client threads
    }

    static void commands(boolean share) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split("\\s+");
            if (w[0].equals("exit")) break;
            if (w[0].equals("join")) {
                Member m = share ? new ShareMember(w[1], w[2]) : new GroupMember(w[1], w[2]);
                MEMBERS.put(w[1], m);
                m.thread = new Thread(m, "member-" + w[1]);
                m.thread.start();
            } else if (w[0].equals("close")) {
                MEMBERS.remove(w[1]).stop();
            }
        }
        for (Member m : MEMBERS.values()) m.stop();
    }

    abstract static class Member implements Runnable {
        final String name;
        final String mode;
        volatile boolean closing;
        Thread thread;

        Member(String name, String mode) {
            this.name = name;
            this.mode = mode;
        }

        void stop() throws InterruptedException {
            closing = true;
            thread.join(30_000);
        }

        Properties props() {
            Properties p = new Properties();
            p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            p.put(ConsumerConfig.CLIENT_ID_CONFIG, "java4-" + name);
            p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
            p.put(ConsumerConfig.METADATA_MAX_AGE_CONFIG, "2000");
            return p;
        }
    }

    /** A KafkaConsumer of the classic or the consumer (KIP-848) protocol. */
    static final class GroupMember extends Member {
        GroupMember(String name, String protocol) {
            super(name, protocol);
        }

        @Override
        public void run() {
            Properties p = TestKit.manualCommit(props(), group, null);
            p.put("group.protocol", mode);
            p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "50");
            if (mode.equals("classic")) {
                p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
                p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
            }
            try {
                KafkaConsumer<String, String> c = new KafkaConsumer<>(p, new StringDeserializer(),
                        new StringDeserializer());
                c.subscribe(List.of(topic));
                emit(obj("event", "joined", "member", name, "protocol", mode));
                TreeSet<Integer> last = null;
                long seq = 0;
                while (!closing) {
                    ConsumerRecords<String, String> rs = c.poll(Duration.ofMillis(100));
                    TreeSet<Integer> now = new TreeSet<>();
                    for (TopicPartition tp : c.assignment()) now.add(tp.partition());
                    if (!now.equals(last)) {
                        emit(obj("event", "assigned", "member", name, "partitions", new ArrayList<>(now)));
                        last = now;
                    }
                    if (rs.isEmpty()) continue;
                    seq++;
                    List<Object> recs = new ArrayList<>();
                    Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                    Map<TopicPartition, Long> first = new HashMap<>();
                    for (ConsumerRecord<String, String> r : rs) {
                        recs.add(List.of(r.partition(), r.offset(), r.value()));
                        TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                        offsets.put(tp, new OffsetAndMetadata(r.offset() + 1));
                        first.putIfAbsent(tp, r.offset());
                    }
                    emit(obj("event", "batch", "member", name, "seq", seq, "records", recs));
                    try {
                        c.commitSync(offsets, Duration.ofSeconds(15));
                        emit(obj("event", "committed", "member", name, "seq", seq));
                    } catch (KafkaException e) {
                        emit(obj("event", "commit_failed", "member", name, "seq", seq,
                                "error", e.getClass().getSimpleName(), "message", String.valueOf(e.getMessage())));
                        for (Map.Entry<TopicPartition, Long> f : first.entrySet()) {
                            if (c.assignment().contains(f.getKey())) c.seek(f.getKey(), f.getValue());
                        }
                    }
                }
                c.close(CloseOptions.timeout(Duration.ofSeconds(15)));
                emit(obj("event", "closed", "member", name));
            } catch (Throwable e) {
                emit(obj("event", "member_error", "member", name, "error", e.getClass().getSimpleName(),
                        "message", String.valueOf(e.getMessage())));
            }
        }
    }

    /** A KafkaShareConsumer (KIP-932) in explicit acknowledgement mode. */
    static final class ShareMember extends Member {
        ShareMember(String name, String mode) {
            super(name, mode);
        }

        @Override
        public void run() {
            Properties p = props();
            p.put("share.acknowledgement.mode", "explicit");
            p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10");
            try {
                KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p, new StringDeserializer(),
                        new StringDeserializer());
                c.subscribe(List.of(topic));
                emit(obj("event", "joined", "member", name, "mode", mode));
                boolean holding = false;
                while (!closing) {
                    if (holding) {  // acknowledges nothing and polls no more (explicit mode forbids a poll then)
                        Thread.sleep(50);
                        continue;
                    }
                    ConsumerRecords<String, String> rs = c.poll(Duration.ofMillis(200));
                    if (rs.isEmpty()) continue;
                    List<Object> recs = new ArrayList<>();
                    for (ConsumerRecord<String, String> r : rs) {
                        recs.add(List.of(r.partition(), r.offset(), r.value(),
                                r.deliveryCount().map(Short::intValue).orElse(-1)));
                    }
                    emit(obj("event", "delivered", "member", name, "records", recs,
                            "lock_ms", c.acquisitionLockTimeoutMs().orElse(-1)));
                    if (mode.equals("hold")) {
                        holding = true;
                        emit(obj("event", "holding", "member", name));
                        continue;
                    }
                    List<Object> acks = new ArrayList<>();
                    for (ConsumerRecord<String, String> r : rs) {
                        AcknowledgeType t = r.value().startsWith("poison") ? AcknowledgeType.RELEASE
                                : AcknowledgeType.ACCEPT;
                        c.acknowledge(r, t);
                        acks.add(List.of(r.offset(), r.value(), t.toString()));
                    }
                    Map<TopicIdPartition, Optional<KafkaException>> res = c.commitSync(Duration.ofSeconds(15));
                    List<Object> errors = new ArrayList<>();
                    for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : res.entrySet()) {
                        e.getValue().ifPresent(x -> errors.add(List.of(e.getKey().partition(),
                                x.getClass().getSimpleName(), String.valueOf(x.getMessage()))));
                    }
                    emit(obj("event", "acked", "member", name, "acks", acks, "errors", errors,
                            "partitions", res.size()));
                }
                c.close(Duration.ofSeconds(15));
                emit(obj("event", "closed", "member", name));
            } catch (Throwable e) {
                emit(obj("event", "member_error", "member", name, "error", e.getClass().getSimpleName(),
                        "message", String.valueOf(e.getMessage())));
            }
        }
    }

    static Admin admin(String bootstrap) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return Admin.create(p);
    }

    /** Admin.describeConsumerGroups: 4.x asks ConsumerGroupDescribe (API 69) first and DescribeGroups for a classic
     * group; the group epochs come from ConsumerGroupDescribe only. */
    static void describeGroup(String bootstrap, String group) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            List<Object> members = new ArrayList<>();
            for (MemberDescription m : d.members()) {
                List<Integer> parts = new ArrayList<>();
                for (TopicPartition tp : m.assignment().topicPartitions()) parts.add(tp.partition());
                java.util.Collections.sort(parts);
                members.add(obj("client_id", m.clientId(), "member_epoch", m.memberEpoch().orElse(-1),
                        "upgraded", m.upgraded().map(String::valueOf).orElse("unknown"), "partitions", parts));
            }
            emit(obj("event", "group", "type", String.valueOf(d.type()), "state", String.valueOf(d.groupState()),
                    "assignor", d.partitionAssignor(), "group_epoch", d.groupEpoch().orElse(-1),
                    "target_epoch", d.targetAssignmentEpoch().orElse(-1), "members", members));
        }
    }

    /** Admin.describeShareGroups (ShareGroupDescribe, API 77). */
    static void describeShareGroup(String bootstrap, String group) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            ShareGroupDescription d = admin.describeShareGroups(List.of(group)).all().get().get(group);
            List<Object> members = new ArrayList<>();
            for (ShareMemberDescription m : d.members()) {
                List<Integer> parts = new ArrayList<>();
                for (TopicPartition tp : m.assignment().topicPartitions()) parts.add(tp.partition());
                java.util.Collections.sort(parts);
                members.add(obj("client_id", m.clientId(), "member_epoch", m.memberEpoch(), "partitions", parts));
            }
            emit(obj("event", "share_group", "state", String.valueOf(d.groupState()), "group_epoch", d.groupEpoch(),
                    "members", members));
        }
    }

    static void describeTopics(String bootstrap, String topic, int limit) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            emit(TestKit.describedPaged(admin, topic, limit));
        }
    }

    // ------------------------------------------------------------------------------------------------ JSON out

    static Map<String, Object> obj(Object... kv) {
        return TestKit.obj(kv);
    }

    /** One JSON line, stamped with the wall-clock time ("t"). */
    static void emit(Map<String, Object> m) {
        m.put("t", System.currentTimeMillis());
        TestKit.emit(m);
    }
}
