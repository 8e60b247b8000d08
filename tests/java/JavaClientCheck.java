// Drives a real `tidelog serve` with the Apache Kafka Java client (kafka-clients), for tests/java/.
// Compiled at test time by tests/java/test_java_client.py (javac, into a temp dir, against the jars).
//
//   java -cp <jars>:<classes> JavaClientCheck SCENARIO BOOTSTRAP TOPIC [GROUP]
//   SCENARIO: version | admin | roundtrip | offsets | group | storage | txn | txn_ctp | txn_fence
//   java ... JavaClientCheck dump_log SEGMENT.log   (the batches of a segment file, read by Kafka's record classes)
//
// Every observation is one JSON object per line on stdout ({"event": ..., ...}); the pytest side asserts on them.
// The program asserts nothing itself: it only reports what the client saw. Exceptions are reported as
// {"event": "error", ...} and give exit code 1. Every wait is bounded by a deadline.

import java.io.FileInputStream;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.ControlRecordType;
import org.apache.kafka.common.record.EndTransactionMarker;
import org.apache.kafka.common.record.FileRecords;
import org.apache.kafka.common.record.Record;
import org.apache.kafka.common.record.RecordBatch;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.utils.AppInfoParser;

public final class JavaClientCheck {
    static final String[] CODECS = {"none", "gzip", "snappy", "lz4", "zstd"};
    static final int PER_CODEC = 20;
    static final long TS_BASE = 1_700_000_000_000L;
    static final long DEADLINE_MS = 40_000;

    private JavaClientCheck() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: JavaClientCheck version | SCENARIO BOOTSTRAP TOPIC [GROUP]");
            System.exit(2);
        }
        int rc = 0;
        try {
            switch (args[0]) {
                case "version" -> emit(obj("event", "version", "version", AppInfoParser.getVersion(),
                        "commit", AppInfoParser.getCommitId()));
                case "admin" -> admin(args[1], args[2]);
                case "roundtrip" -> roundtrip(args[1], args[2]);
                case "offsets" -> offsets(args[1], args[2]);
                case "group" -> group(args[1], args[2], args[3]);
                case "storage" -> storage(args[1], args[2]);
                case "txn" -> txn(args[1], args[2]);
                case "txn_ctp" -> txnConsumeTransformProduce(args[1], args[2], args[3]);
                case "txn_fence" -> txnFence(args[1], args[2]);
                case "dump_log" -> dumpLog(args[1]);
                case "quotas" -> quotas(args[1]);
                case "acls" -> acls(args[1], args[2], args[3]);
                case "dynconf" -> dynconf(args[1], args[2]);
                case "describe_topics" -> describeTopicsPaged(args[1], args[2], Integer.parseInt(args[3]));
                case "group848" -> group848(args[1], args[2], args[3]);
                case "migrate" -> migrate(args[1], args[2], args[3]);
                default -> throw new IllegalArgumentException("unknown scenario " + args[0]);
            }
            emit(obj("event", "done"));
        } catch (Throwable t) {
            Throwable c = t instanceof ExecutionException && t.getCause() != null ? t.getCause() : t;
            emit(obj("event", "error", "type", c.getClass().getName(), "message", String.valueOf(c.getMessage())));
            t.printStackTrace();
            rc = 1;
        }
        System.out.flush();
        System.exit(rc);
    }

    // ------------------------------------------------------------------------------------------- clients

    static Properties common(String bootstrap, String clientId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", clientId);
        p.put("request.timeout.ms", "15000");
        p.put("default.api.timeout.ms", "20000");
        // -Dcheck.client.config=<file>: security settings (security.protocol, ssl.*, sasl.*) for every client
        String extra = System.getProperty("check.client.config");
        if (extra != null) {
            try (InputStream in = new FileInputStream(extra)) {
                p.load(in);
            } catch (java.io.IOException e) {
                throw new IllegalStateException("cannot read " + extra, e);
            }
        }
        return p;
    }

    static Admin admin(String bootstrap) {
        Properties p = common(bootstrap, "java-check-admin");
        p.put(AdminClientConfig.RETRIES_CONFIG, "5");
        return Admin.create(p);
    }

    static KafkaProducer<byte[], byte[]> producer(String bootstrap, String codec) {
        // long linger + flush(): everything sent before flush() leaves in as few batches as fit
        Properties p = TestKit.delivery(common(bootstrap, "java-check-producer-" + codec), "all", 5000, 30000, 20000);
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, "1048576");
        return new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
    }

    static KafkaConsumer<byte[], byte[]> consumer(String bootstrap, String clientId, String group) {
        Properties p = TestKit.manualCommit(common(bootstrap, clientId), group, null);
        if (group != null) {
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
            p.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, "30000");
        }
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "7");  // several polls per partition
        return new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    static KafkaProducer<byte[], byte[]> txnProducer(String bootstrap, String transactionalId) {
        Properties p = TestKit.delivery(common(bootstrap, "java-check-txn"), "all", 5, 30000, 20000);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "10000");
        return new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
    }

    static KafkaConsumer<byte[], byte[]> consumer(String bootstrap, String clientId, String group, String isolation) {
        Properties p = TestKit.manualCommit(common(bootstrap, clientId), group, isolation);
        if (group != null) {
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        }
        return new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    static void createTopic(Admin admin, String topic, int partitions) throws Exception {
        admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
    }

    // ------------------------------------------------------------------------------------- client quotas

    static Map<String, Object> quotaMap(Map<ClientQuotaEntity, Map<String, Double>> described) {
        Map<String, Object> out = new TreeMap<>();
        for (var e : described.entrySet()) {
            out.put(new TreeMap<>(e.getKey().entries()).toString(), new TreeMap<>(e.getValue()));
        }
        return out;
    }

    static void quotas(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            Map<String, String> aliceDefault = new HashMap<>();
            aliceDefault.put(ClientQuotaEntity.USER, "alice");
            aliceDefault.put(ClientQuotaEntity.CLIENT_ID, null);  // <default>
            ClientQuotaEntity e1 = new ClientQuotaEntity(aliceDefault);
            ClientQuotaEntity e2 = new ClientQuotaEntity(Map.of(ClientQuotaEntity.CLIENT_ID, "java-app"));
            admin.alterClientQuotas(List.of(
                    new ClientQuotaAlteration(e1, List.of(new ClientQuotaAlteration.Op("producer_byte_rate", 1048576.0),
                            new ClientQuotaAlteration.Op("request_percentage", 25.0))),
                    new ClientQuotaAlteration(e2, List.of(new ClientQuotaAlteration.Op("consumer_byte_rate", 2048.0)))
            )).all().get();
            emit(obj("event", "all", "quotas", quotaMap(admin.describeClientQuotas(ClientQuotaFilter.all()).entities().get())));
            ClientQuotaFilter aliceOnly = ClientQuotaFilter.contains(List.of(ClientQuotaFilterComponent.ofEntity("user", "alice")));
            emit(obj("event", "alice", "quotas", quotaMap(admin.describeClientQuotas(aliceOnly).entities().get())));
            ClientQuotaFilter defaults = ClientQuotaFilter.containsOnly(List.of(ClientQuotaFilterComponent.ofDefaultEntity("client-id")));
            emit(obj("event", "strict_default_client", "quotas", quotaMap(admin.describeClientQuotas(defaults).entities().get())));
            // validate only: accepted, not applied
            admin.alterClientQuotas(List.of(new ClientQuotaAlteration(e2,
                    List.of(new ClientQuotaAlteration.Op("consumer_byte_rate", 1.0)))),
                    new org.apache.kafka.clients.admin.AlterClientQuotasOptions().validateOnly(true)).all().get();
            emit(obj("event", "after_validate_only", "quotas", quotaMap(admin.describeClientQuotas(ClientQuotaFilter.all()).entities().get())));
            // a fractional byte rate is refused
            try {
                admin.alterClientQuotas(List.of(new ClientQuotaAlteration(e2,
                        List.of(new ClientQuotaAlteration.Op("producer_byte_rate", 0.5))))).all().get();
                emit(obj("event", "fractional", "error", null));
            } catch (ExecutionException ex) {
                emit(obj("event", "fractional", "error", ex.getCause().getClass().getSimpleName(),
                        "message", ex.getCause().getMessage()));
            }
            // removal (a null value)
            admin.alterClientQuotas(List.of(
                    new ClientQuotaAlteration(e1, List.of(new ClientQuotaAlteration.Op("producer_byte_rate", null),
                            new ClientQuotaAlteration.Op("request_percentage", null))),
                    new ClientQuotaAlteration(e2, List.of(new ClientQuotaAlteration.Op("consumer_byte_rate", null)))
            )).all().get();
            emit(obj("event", "after_remove", "quotas", quotaMap(admin.describeClientQuotas(ClientQuotaFilter.all()).entities().get())));
        }
    }

    // ------------------------------------------------------ dynamic broker configs, KIP-714 telemetry (issue 27)

    static void dynconf(String bootstrap, String topic) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
            // the cluster default: an empty resource name (only the Java Admin can name it)
            ConfigResource dflt = new ConfigResource(ConfigResource.Type.BROKER, "");
            admin.incrementalAlterConfigs(Map.of(dflt, List.of(new org.apache.kafka.clients.admin.AlterConfigOp(
                    new ConfigEntry("log.retention.ms", "3600000"),
                    org.apache.kafka.clients.admin.AlterConfigOp.OpType.SET)))).all().get();
            ConfigResource t = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            ConfigEntry r = admin.describeConfigs(List.of(t)).all().get().get(t).get("retention.ms");
            emit(obj("event", "topic", "value", r.value(), "source", r.source().name()));
            Map<String, Object> defaults = new TreeMap<>();
            for (ConfigEntry e : admin.describeConfigs(List.of(dflt)).all().get().get(dflt).entries()) {
                defaults.put(e.name(), e.value() + "/" + e.source().name());
            }
            emit(obj("event", "default", "configs", defaults));
            try {
                admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.BROKER, "0"),
                        List.of(new org.apache.kafka.clients.admin.AlterConfigOp(new ConfigEntry("num.partitions", "3"),
                                org.apache.kafka.clients.admin.AlterConfigOp.OpType.SET)))).all().get();
                emit(obj("event", "read_only", "error", null));
            } catch (ExecutionException ex) {
                emit(obj("event", "read_only", "error", ex.getCause().getClass().getSimpleName(),
                        "message", ex.getCause().getMessage()));
            }
            // KIP-714: the Admin's client instance id comes from GetTelemetrySubscriptions
            emit(obj("event", "telemetry", "client_instance_id", String.valueOf(admin.clientInstanceId(Duration.ofSeconds(20)))));
        }
    }

    // ---------------------------------------------------------------------------------------- scenario 1

    /** describeTopics answered through DescribeTopicPartitions (API 75) in pages of {@code limit} partitions, and
     * describeFeatures (ApiVersions' features), as kafka-features.sh describe reads them. */
    static void describeTopicsPaged(String bootstrap, String topic, int limit) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            emit(TestKit.describedPaged(admin, topic, limit));
            org.apache.kafka.clients.admin.FeatureMetadata fm = admin.describeFeatures().featureMetadata().get();
            Map<String, Object> supported = new TreeMap<>();
            fm.supportedFeatures().forEach((k, v) -> supported.put(k, List.of(v.minVersion(), v.maxVersion())));
            Map<String, Object> finalized = new TreeMap<>();
            fm.finalizedFeatures().forEach((k, v) -> finalized.put(k, v.maxVersionLevel()));
            emit(obj("event", "features", "supported", supported, "finalized", finalized,
                    "epoch", fm.finalizedFeaturesEpoch().orElse(-1L)));
        }
    }

    static void admin(String bootstrap, String topic) throws Exception {
        try (Admin admin = admin(bootstrap); KafkaProducer<byte[], byte[]> producer = producer(bootstrap, "none")) {
            DescribeClusterResult cluster = admin.describeCluster();
            List<Object> nodes = new ArrayList<>();
            for (Node n : cluster.nodes().get()) {
                nodes.add(obj("id", n.id(), "host", n.host(), "port", n.port()));
            }
            Node controller = cluster.controller().get();
            emit(obj("event", "cluster", "cluster_id", cluster.clusterId().get(), "nodes", nodes,
                    "controller", controller == null ? null : controller.id()));

            NewTopic nt = new NewTopic(topic, 3, (short) 1)
                    .configs(Map.of("retention.ms", "7200000", "cleanup.policy", "delete"));
            CreateTopicsResult created = admin.createTopics(List.of(nt));
            created.all().get();
            Map<String, Object> createdCfg = new TreeMap<>();
            for (ConfigEntry e : created.config(topic).get().entries()) {
                createdCfg.put(e.name(), e.value());
            }
            emit(obj("event", "created", "partitions", created.numPartitions(topic).get(),
                    "replication_factor", created.replicationFactor(topic).get(),
                    "topic_id", String.valueOf(created.topicId(topic).get()), "configs", createdCfg));

            // creating it again must fail with TopicExistsException
            try {
                admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get();
                emit(obj("event", "create_again", "error", null));
            } catch (ExecutionException e) {
                emit(obj("event", "create_again", "error", e.getCause().getClass().getSimpleName()));
            }

            TopicDescription td = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            List<Object> parts = new ArrayList<>();
            for (TopicPartitionInfo pi : td.partitions()) {
                parts.add(obj("partition", pi.partition(), "leader", pi.leader() == null ? null : pi.leader().id(),
                        "replicas", pi.replicas().stream().map(Node::id).toList(),
                        "isr", pi.isr().stream().map(Node::id).toList()));
            }
            emit(obj("event", "described", "name", td.name(), "internal", td.isInternal(),
                    "topic_id", String.valueOf(td.topicId()), "partitions", parts));

            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config cfg = admin.describeConfigs(List.of(res)).all().get().get(res);
            Map<String, Object> entries = new TreeMap<>();
            for (ConfigEntry e : cfg.entries()) {
                entries.put(e.name(), obj("value", e.value(), "source", e.source().name(),
                        "default", e.isDefault(), "read_only", e.isReadOnly(), "sensitive", e.isSensitive()));
            }
            emit(obj("event", "configs", "entries", entries));

            emit(obj("event", "listed", "names", new ArrayList<>(new TreeMap<>(toMap(admin.listTopics().names().get())).keySet())));

            // ten records per partition, then DeleteRecords: p0 before 4, p1 all (high watermark), p2 untouched
            List<RecordMetadata> mds = new ArrayList<>();
            List<java.util.concurrent.Future<RecordMetadata>> fs = new ArrayList<>();
            for (int p = 0; p < 3; p++) {
                for (int i = 0; i < 10; i++) {
                    fs.add(producer.send(new ProducerRecord<>(topic, p, bytes("k" + i), bytes("v" + p + "-" + i))));
                }
            }
            producer.flush();
            for (var f : fs) {
                mds.add(f.get());
            }
            Map<Integer, Long> ends = new TreeMap<>();
            for (RecordMetadata md : mds) {
                ends.merge(md.partition(), md.offset() + 1, Math::max);
            }
            emit(obj("event", "produced", "ends", ends));

            TopicPartition p0 = new TopicPartition(topic, 0);
            TopicPartition p1 = new TopicPartition(topic, 1);
            TopicPartition p2 = new TopicPartition(topic, 2);
            var del = admin.deleteRecords(Map.of(p0, RecordsToDelete.beforeOffset(4), p1, RecordsToDelete.beforeOffset(-1)));
            Map<String, Object> lows = new TreeMap<>();
            for (var e : del.lowWatermarks().entrySet()) {
                lows.put(String.valueOf(e.getKey().partition()), e.getValue().get().lowWatermark());
            }
            emit(obj("event", "deleted_records", "low_watermarks", lows));

            // out of range: beyond the high watermark
            try {
                admin.deleteRecords(Map.of(p2, RecordsToDelete.beforeOffset(11))).all().get();
                emit(obj("event", "delete_records_beyond_end", "error", null));
            } catch (ExecutionException e) {
                emit(obj("event", "delete_records_beyond_end", "error", e.getCause().getClass().getSimpleName()));
            }

            Map<TopicPartition, OffsetSpec> q = new HashMap<>();
            for (TopicPartition tp : List.of(p0, p1, p2)) {
                q.put(tp, OffsetSpec.earliest());
            }
            Map<String, Object> earliest = new TreeMap<>();
            for (var e : admin.listOffsets(q).all().get().entrySet()) {
                earliest.put(String.valueOf(e.getKey().partition()), e.getValue().offset());
            }
            emit(obj("event", "earliest_after_delete", "offsets", earliest));

            // a consumer from the beginning of p0 starts at the new log start offset
            try (KafkaConsumer<byte[], byte[]> c = consumer(bootstrap, "java-check-admin-reader", null)) {
                c.assign(List.of(p0));
                c.seekToBeginning(List.of(p0));
                List<ConsumerRecord<byte[], byte[]>> got = readUntil(c, Map.of(p0, 10L));
                emit(obj("event", "read_after_delete", "offsets", got.stream().map(ConsumerRecord::offset).toList(),
                        "values", got.stream().map(r -> str(r.value())).toList()));
            }

            admin.deleteTopics(List.of(topic)).all().get();
            emit(obj("event", "topic_deleted"));
            boolean listed = admin.listTopics().names().get().contains(topic);
            String describeErr = null;
            try {
                admin.describeTopics(List.of(topic)).allTopicNames().get();
            } catch (ExecutionException e) {
                describeErr = e.getCause().getClass().getSimpleName();
            }
            emit(obj("event", "after_delete", "listed", listed, "describe_error", describeErr));
        }
    }

    // ---------------------------------------------------------------------------------------- scenario 2

    static List<Header> headersFor(int i) {
        List<Header> hs = new ArrayList<>();
        switch (i % 4) {
            case 0 -> { }
            case 1 -> hs.add(new RecordHeader("trace", bytes("t-" + i)));
            case 2 -> {
                hs.add(new RecordHeader("dup", bytes("first")));
                hs.add(new RecordHeader("dup", bytes("second")));
                hs.add(new RecordHeader("null-header", (byte[]) null));
                hs.add(new RecordHeader("empty", new byte[0]));
            }
            default -> hs.add(new RecordHeader("bin\u00e9", new byte[] {0, (byte) 0xff, 1, (byte) 0x80}));
        }
        return hs;
    }

    static byte[] keyFor(String codec, int i) {
        if (i % 5 == 0) return null;
        if (i % 5 == 1) return new byte[0];
        return bytes("key-" + codec + "-" + i);
    }

    static byte[] valueFor(String codec, int i) {
        if (i % 7 == 3) return null;
        if (i % 7 == 4) return new byte[0];
        StringBuilder sb = new StringBuilder();
        for (int r = 0; r < 1 + i * 3; r++) sb.append("value ").append(codec).append(' ').append(i).append(';');
        byte[] text = bytes(sb.toString());
        byte[] out = new byte[text.length + 256];
        System.arraycopy(text, 0, out, 0, text.length);
        for (int b = 0; b < 256; b++) out[text.length + b] = (byte) b;  // every byte value
        return out;
    }

    static void roundtrip(String bootstrap, String topic) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            createTopic(admin, topic, 1);
        }
        TopicPartition tp = new TopicPartition(topic, 0);
        for (String codec : CODECS) {
            try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, codec)) {
                List<java.util.concurrent.Future<RecordMetadata>> fs = new ArrayList<>();
                for (int i = 0; i < PER_CODEC; i++) {
                    long ts = TS_BASE + i * 1000L + (codec.hashCode() & 0xff);
                    fs.add(producer.send(new ProducerRecord<>(topic, 0, ts, keyFor(codec, i), valueFor(codec, i),
                            headersFor(i))));
                }
                producer.flush();
                for (int i = 0; i < PER_CODEC; i++) {
                    RecordMetadata md = fs.get(i).get();
                    ProducerRecord<byte[], byte[]> sent = new ProducerRecord<>(topic, 0,
                            TS_BASE + i * 1000L + (codec.hashCode() & 0xff), keyFor(codec, i), valueFor(codec, i),
                            headersFor(i));
                    emit(recordJson("sent", codec, md.partition(), md.offset(), md.timestamp(), "CreateTime",
                            sent.key(), sent.value(), sent.headers()));
                }
            }
        }
        try (KafkaConsumer<byte[], byte[]> c = consumer(bootstrap, "java-check-roundtrip-reader", null)) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            long end = c.endOffsets(List.of(tp)).get(tp);
            emit(obj("event", "end_offset", "offset", end));
            for (ConsumerRecord<byte[], byte[]> r : readUntil(c, Map.of(tp, end))) {
                emit(recordJson("read", null, r.partition(), r.offset(), r.timestamp(), r.timestampType().name,
                        r.key(), r.value(), r.headers()));
            }
        }
    }

    // ---------------------------------------------------------------------------------------- scenario 5

    // What kafka-log-dirs.sh and kafka-transactions.sh describe-producers call: Admin.describeLogDirs and
    // Admin.describeProducers, after one idempotent producer wrote PER_CODEC records to partition 0.
    static void storage(String bootstrap, String topic) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            createTopic(admin, topic, 2);
            try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, "none")) {
                for (int i = 0; i < PER_CODEC; i++) {
                    producer.send(new ProducerRecord<>(topic, 0, TS_BASE + i, keyFor("none", i), valueFor("none", i)));
                }
                producer.flush();
            }
            int node = admin.describeCluster().nodes().get().iterator().next().id();
            Map<String, LogDirDescription> dirs = admin.describeLogDirs(List.of(node)).allDescriptions().get().get(node);
            for (Map.Entry<String, LogDirDescription> d : dirs.entrySet()) {
                LogDirDescription desc = d.getValue();
                emit(obj("event", "log_dir", "path", d.getKey(),
                        "error", desc.error() == null ? null : desc.error().getClass().getSimpleName(),
                        "total_bytes", desc.totalBytes().orElse(-1), "usable_bytes", desc.usableBytes().orElse(-1)));
                for (Map.Entry<TopicPartition, ReplicaInfo> r : desc.replicaInfos().entrySet()) {
                    if (!r.getKey().topic().equals(topic)) continue;
                    emit(obj("event", "replica", "path", d.getKey(), "partition", r.getKey().partition(),
                            "size", r.getValue().size(), "offset_lag", r.getValue().offsetLag(),
                            "future", r.getValue().isFuture()));
                }
            }
            TopicPartition tp0 = new TopicPartition(topic, 0), tp1 = new TopicPartition(topic, 1);
            var states = admin.describeProducers(List.of(tp0, tp1)).all().get();
            for (TopicPartition tp : List.of(tp0, tp1)) {
                for (ProducerState ps : states.get(tp).activeProducers()) {
                    emit(obj("event", "producer", "partition", tp.partition(), "producer_id", ps.producerId(),
                            "epoch", ps.producerEpoch(), "last_sequence", ps.lastSequence(),
                            "last_timestamp", ps.lastTimestamp(),
                            "txn_start", ps.currentTransactionStartOffset().orElse(-1)));
                }
            }
        }
    }

    static Map<String, Object> recordJson(String event, String codec, int partition, long offset, long ts,
                                          String tsType, byte[] key, byte[] value, Iterable<Header> headers) {
        List<Object> hs = new ArrayList<>();
        for (Header h : headers) {
            hs.add(Arrays.asList(h.key(), hexOrNull(h.value())));
        }
        Map<String, Object> m = obj("event", event, "partition", partition, "offset", offset, "timestamp", ts,
                "timestamp_type", tsType, "key", hexOrNull(key), "value", hexOrNull(value), "headers", hs);
        if (codec != null) m.put("codec", codec);
        return m;
    }

    // ---------------------------------------------------------------------------------------- scenario 3

    static void offsets(String bootstrap, String topic) throws Exception {
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        TopicPartition p2 = new TopicPartition(topic, 2);  // stays empty
        List<TopicPartition> all = List.of(p0, p1, p2);
        try (Admin admin = admin(bootstrap)) {
            createTopic(admin, topic, 3);
            try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, "none")) {
                List<java.util.concurrent.Future<RecordMetadata>> fs = new ArrayList<>();
                for (int i = 0; i < 10; i++) {  // p0: TS_BASE + 0, 1000, ..., 9000
                    fs.add(producer.send(new ProducerRecord<>(topic, 0, TS_BASE + i * 1000L, null, bytes("p0-" + i))));
                }
                for (int i = 0; i < 5; i++) {  // p1: TS_BASE + 500, 2500, ..., 8500 (+ one out of order, below)
                    fs.add(producer.send(new ProducerRecord<>(topic, 1, TS_BASE + 500 + i * 2000L, null, bytes("p1-" + i))));
                }
                // a late record with an older timestamp: offsetsForTimes must not return it for a later target
                fs.add(producer.send(new ProducerRecord<>(topic, 1, TS_BASE + 100, null, bytes("p1-late"))));
                producer.flush();
                for (var f : fs) {
                    f.get();
                }
            }
            try (KafkaConsumer<byte[], byte[]> c = consumer(bootstrap, "java-check-offsets", null)) {
                emit(obj("event", "beginning", "offsets", byPartition(c.beginningOffsets(all))));
                emit(obj("event", "end", "offsets", byPartition(c.endOffsets(all))));
                long[][] queries = {
                    {0, TS_BASE - 1}, {0, TS_BASE}, {0, TS_BASE + 1500}, {0, TS_BASE + 9000}, {0, TS_BASE + 9001},
                    {1, TS_BASE}, {1, TS_BASE + 501}, {1, TS_BASE + 8500}, {1, TS_BASE + 8501}, {2, TS_BASE},
                };
                for (long[] qy : queries) {
                    TopicPartition tp = new TopicPartition(topic, (int) qy[0]);
                    OffsetAndTimestamp ot = c.offsetsForTimes(Map.of(tp, qy[1])).get(tp);
                    emit(obj("event", "for_time", "partition", (int) qy[0], "target", qy[1],
                            "offset", ot == null ? null : ot.offset(), "timestamp", ot == null ? null : ot.timestamp()));
                }
            }
            // the Admin view of the same: earliest / latest / max timestamp
            for (String spec : List.of("earliest", "latest", "max_timestamp")) {
                Map<TopicPartition, OffsetSpec> q = new HashMap<>();
                for (TopicPartition tp : all) {
                    q.put(tp, switch (spec) {
                        case "earliest" -> OffsetSpec.earliest();
                        case "latest" -> OffsetSpec.latest();
                        default -> OffsetSpec.maxTimestamp();
                    });
                }
                Map<String, Object> res = new TreeMap<>();
                for (Map.Entry<TopicPartition, ListOffsetsResultInfo> e : admin.listOffsets(q).all().get().entrySet()) {
                    res.put(String.valueOf(e.getKey().partition()),
                            obj("offset", e.getValue().offset(), "timestamp", e.getValue().timestamp()));
                }
                emit(obj("event", "admin_list_offsets", "spec", spec, "result", res));
            }
        }
    }

    // ---------------------------------------------------------------------------------------- scenario 4

    /** One group member on its own thread (a KafkaConsumer is single-threaded); its state is guarded by
     *  the shared {@code lock}, which it notifies on every change. */
    static final class Member implements Runnable, ConsumerRebalanceListener {
        final String name;
        final KafkaConsumer<byte[], byte[]> consumer;
        final String topic;
        final AtomicLong target;  // position every assigned partition must reach
        final AtomicBoolean stop;
        final Object lock;
        final List<Object> rebalances = new ArrayList<>();
        final Map<Integer, List<Long>> consumed = new TreeMap<>();
        Set<Integer> assignment = Set.of();
        boolean caughtUp;  // every assigned partition read to caughtUpAt and committed, no rebalance since
        long caughtUpAt = -1;
        String consumerId;
        Throwable failure;
        boolean exited;

        Member(String name, String bootstrap, String topic, String group, AtomicLong target, AtomicBoolean stop,
               Object lock) {
            this.name = name;
            this.consumer = consumer(bootstrap, name, group);
            this.topic = topic;
            this.target = target;
            this.stop = stop;
            this.lock = lock;
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> parts) {
            synchronized (lock) {
                caughtUp = false;
                lock.notifyAll();
            }
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> parts) {
            Set<Integer> s = new HashSet<>();
            for (TopicPartition tp : parts) s.add(tp.partition());
            synchronized (lock) {
                assignment = Set.copyOf(s);
                caughtUp = false;
                rebalances.add(new ArrayList<>(new TreeMap<>(toMap(s)).keySet()));
                lock.notifyAll();
            }
        }

        @Override
        public void run() {
            try {
                consumer.subscribe(List.of(topic), this);
                long committedFor = -1;
                while (!stop.get()) {
                    long want = target.get();
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                        synchronized (lock) {
                            consumed.computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r.offset());
                        }
                    }
                    Set<TopicPartition> mine = consumer.assignment();
                    boolean done = !mine.isEmpty();
                    for (TopicPartition tp : mine) {
                        done &= consumer.position(tp) >= want;
                    }
                    synchronized (lock) {
                        if (!caughtUp) committedFor = -1;  // a rebalance since the last commit: commit again
                    }
                    if (done && committedFor != want) {
                        consumer.commitSync();
                        committedFor = want;
                        String id = consumer.groupMetadata().memberId();
                        synchronized (lock) {
                            consumerId = id;
                            caughtUp = true;
                            caughtUpAt = want;
                            lock.notifyAll();
                        }
                    }
                }
            } catch (Throwable t) {
                synchronized (lock) {
                    failure = t;
                    lock.notifyAll();
                }
            } finally {
                consumer.close(Duration.ofSeconds(10));  // LeaveGroup
                synchronized (lock) {
                    exited = true;
                    lock.notifyAll();
                }
            }
        }
    }

    static void group(String bootstrap, String topic, String group) throws Exception {
        final int partitions = 4;
        final long first = 10;  // records per partition while both members are in
        final long more = 5;    // added after they left
        try (Admin admin = admin(bootstrap); KafkaProducer<byte[], byte[]> producer = producer(bootstrap, "lz4")) {
            createTopic(admin, topic, partitions);

            AtomicBoolean stop = new AtomicBoolean();
            AtomicLong target = new AtomicLong(0);
            Object lock = new Object();
            Member a = new Member("java-member-a", bootstrap, topic, group, target, stop, lock);
            Member b = new Member("java-member-b", bootstrap, topic, group, target, stop, lock);
            Thread ta = new Thread(a, "member-a");
            Thread tb = new Thread(b, "member-b");
            ta.start();
            tb.start();
            // phase 1: both members in, the partitions split between them (topic still empty)
            boolean split = awaitSplit(a, b, lock, partitions, 0);
            emit(obj("event", "split_empty", "ok", split));
            // phase 2: records arrive; each member reads its own partitions and commits
            produceEach(producer, topic, partitions, 0, first);
            target.set(first);
            split = awaitSplit(a, b, lock, partitions, first);
            for (Member m : List.of(a, b)) {
                synchronized (lock) {
                    emit(obj("event", "member", "name", m.name, "member_id", m.consumerId,
                            "assignment", new ArrayList<>(new TreeMap<>(toMap(m.assignment)).keySet()),
                            "caught_up", m.caughtUp, "rebalances", m.rebalances, "consumed", stringKeys(m.consumed)));
                }
            }
            emit(obj("event", "split", "ok", split));

            // while both members are in: the Admin view of the group
            Map<String, Object> listing = new TreeMap<>();
            for (ConsumerGroupListing l : admin.listConsumerGroups().all().get()) {
                listing.put(l.groupId(), obj("simple", l.isSimpleConsumerGroup(),
                        "state", l.state().map(Enum::name).orElse(null)));
            }
            emit(obj("event", "list_groups", "groups", listing));
            emit(describeGroup(admin, group, "describe_active"));
            emit(obj("event", "committed_active", "offsets", committedOffsets(admin, group)));

            stop.set(true);
            ta.join(20_000);
            tb.join(20_000);
            emit(obj("event", "members_closed", "alive", ta.isAlive() || tb.isAlive(),
                    "failure", a.failure != null ? a.failure.toString() : b.failure != null ? b.failure.toString() : null));
            emit(describeGroup(admin, group, "describe_empty"));

            produceEach(producer, topic, partitions, first, more);

            // a fresh member of the same group resumes at the committed offsets
            try (KafkaConsumer<byte[], byte[]> c = consumer(bootstrap, "java-member-fresh", group)) {
                c.subscribe(List.of(topic));
                Map<Integer, List<Long>> got = new TreeMap<>();
                long want = partitions * more;
                long n = 0;
                Map<String, Object> positionsAtAssign = null;
                long dl = System.currentTimeMillis() + DEADLINE_MS;
                while (n < want && System.currentTimeMillis() < dl) {
                    for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                        got.computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r.offset());
                        n++;
                    }
                    if (positionsAtAssign == null && !c.assignment().isEmpty()) {
                        positionsAtAssign = new TreeMap<>();
                        Map<TopicPartition, OffsetAndMetadata> com = c.committed(c.assignment());
                        for (var e : com.entrySet()) {
                            positionsAtAssign.put(String.valueOf(e.getKey().partition()),
                                    e.getValue() == null ? null : e.getValue().offset());
                        }
                    }
                }
                // nothing beyond what was produced arrives after a short extra poll
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(300))) {
                    got.computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r.offset());
                }
                emit(obj("event", "fresh_member", "committed_seen", positionsAtAssign, "consumed", stringKeys(got),
                        "assignment", c.assignment().stream().map(TopicPartition::partition).sorted().toList()));
                c.commitSync();
            }
            emit(obj("event", "committed_final", "offsets", committedOffsets(admin, group)));
        }
    }

    /** Wait (bounded) until both members hold disjoint, non-empty assignments covering the topic and have
     *  read and committed every assigned partition up to {@code want}. */
    static boolean awaitSplit(Member a, Member b, Object lock, int partitions, long want) throws Exception {
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        synchronized (lock) {
            while (true) {
                if (a.failure != null) throw new RuntimeException("member a failed", a.failure);
                if (b.failure != null) throw new RuntimeException("member b failed", b.failure);
                Set<Integer> union = new HashSet<>(a.assignment);
                union.addAll(b.assignment);
                boolean split = a.caughtUp && b.caughtUp && a.caughtUpAt == want && b.caughtUpAt == want
                        && !a.assignment.isEmpty() && !b.assignment.isEmpty()
                        && union.size() == partitions && a.assignment.size() + b.assignment.size() == partitions;
                long left = deadline - System.currentTimeMillis();
                if (split || left <= 0) return split;
                lock.wait(left);  // members notify on every assignment / progress change
            }
        }
    }

    /** KIP-848: two consumers with group.protocol=consumer (early access in kafka-clients 3.9) share a topic. */
    static void group848(String bootstrap, String topic, String group) throws Exception {
        final int partitions = 4;
        final long perPartition = 10;
        try (Admin admin = admin(bootstrap); KafkaProducer<byte[], byte[]> producer = producer(bootstrap, "none")) {
            createTopic(admin, topic, partitions);
            produceEach(producer, topic, partitions, 0, perPartition);
            producer.flush();
            List<KafkaConsumer<byte[], byte[]>> members = new ArrayList<>();
            Map<String, Map<Integer, List<Long>>> consumed = new TreeMap<>();
            try {
                for (String name : List.of("java848-a", "java848-b")) {
                    Properties p = common(bootstrap, name);
                    p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
                    p.put("group.protocol", "consumer");
                    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
                    p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
                    KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p, new ByteArrayDeserializer(),
                            new ByteArrayDeserializer());
                    c.subscribe(List.of(topic));
                    members.add(c);
                    consumed.put(name, new TreeMap<>());
                }
                long deadline = System.currentTimeMillis() + 60_000;
                boolean split = false;
                while (System.currentTimeMillis() < deadline && !split) {
                    long total = 0;
                    Set<Integer> union = new HashSet<>();
                    boolean bothAssigned = true;
                    for (int i = 0; i < members.size(); i++) {
                        KafkaConsumer<byte[], byte[]> c = members.get(i);
                        String name = i == 0 ? "java848-a" : "java848-b";
                        for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                            consumed.get(name).computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r.offset());
                        }
                        c.commitSync();
                        Set<Integer> mine = new HashSet<>();
                        for (TopicPartition tp : c.assignment()) mine.add(tp.partition());
                        bothAssigned &= !mine.isEmpty();
                        union.addAll(mine);
                        for (List<Long> offs : consumed.get(name).values()) total += offs.size();
                    }
                    split = bothAssigned && union.size() == partitions && total >= partitions * perPartition;
                }
                List<Object> assignments = new ArrayList<>();
                for (KafkaConsumer<byte[], byte[]> c : members) {
                    List<Integer> mine = new ArrayList<>();
                    for (TopicPartition tp : c.assignment()) mine.add(tp.partition());
                    java.util.Collections.sort(mine);
                    assignments.add(mine);
                }
                Map<String, Object> counts = new TreeMap<>();
                for (Map.Entry<String, Map<Integer, List<Long>>> e : consumed.entrySet()) {
                    Map<String, Object> per = new TreeMap<>();
                    for (Map.Entry<Integer, List<Long>> pe : e.getValue().entrySet()) {
                        per.put(String.valueOf(pe.getKey()), pe.getValue());
                    }
                    counts.put(e.getKey(), per);
                }
                emit(obj("event", "group848", "split", split, "assignments", assignments, "consumed", counts));
            } finally {
                for (KafkaConsumer<byte[], byte[]> c : members) c.close(Duration.ofSeconds(5));
            }
            Map<String, Object> committed = new TreeMap<>();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get().entrySet()) {
                committed.put(String.valueOf(e.getKey().partition()), e.getValue() == null ? -1 : e.getValue().offset());
            }
            emit(obj("event", "committed848", "offsets", committed));
        }
    }

    /**
     * Online migration (group.consumer.migration.policy): two classic members (group.protocol=classic) consume; each
     * in turn is closed and replaced by a group.protocol=consumer member while the other runs (the first replacement
     * upgrades the group). A batch of 10 records per partition is produced at each step and read before the next.
     * Emits, per step, the group's type (Admin.describeConsumerGroups) and every member's assignment; then every
     * offset read (a batch whose commit a rebalance refused is read again: at-least-once) and the committed offsets.
     */
    static void migrate(String bootstrap, String topic, String group) throws Exception {
        final int partitions = 4;
        final long perStep = 10;
        try (Admin admin = admin(bootstrap); KafkaProducer<byte[], byte[]> producer = producer(bootstrap, "none")) {
            createTopic(admin, topic, partitions);
            Map<String, KafkaConsumer<byte[], byte[]>> live = new LinkedHashMap<>();
            Map<Integer, List<Long>> consumed = new TreeMap<>();
            List<Object> steps = new ArrayList<>();
            String[][] plan = {{"a", "classic"}, {"b", "classic"}, {"a2", "consumer"}, {"b2", "consumer"}};
            int commitsRefused = 0;
            try {
                for (int step = 0; step < 3; step++) {
                    if (step == 0) {
                        live.put("a", migrateMember(bootstrap, group, topic, "a", "classic"));
                        live.put("b", migrateMember(bootstrap, group, topic, "b", "classic"));
                    } else {
                        String old = step == 1 ? "a" : "b";
                        live.remove(old).close(Duration.ofSeconds(5));
                        String name = plan[step + 1][0];
                        live.put(name, migrateMember(bootstrap, group, topic, name, "consumer"));
                    }
                    produceEach(producer, topic, partitions, step * perStep, perStep);
                    producer.flush();
                    long want = (step + 1) * perStep;
                    long deadline = System.currentTimeMillis() + 45_000;
                    boolean done = false;
                    while (System.currentTimeMillis() < deadline && !done) {
                        Set<Integer> union = new HashSet<>();
                        int owned = 0;
                        boolean everyone = true;
                        for (KafkaConsumer<byte[], byte[]> c : live.values()) {
                            for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                                consumed.computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r.offset());
                            }
                            try {
                                c.commitSync();
                            } catch (org.apache.kafka.common.KafkaException e) {
                                commitsRefused++;  // a rebalance refused it: the records are read again
                            }
                            everyone &= !c.assignment().isEmpty();
                            owned += c.assignment().size();
                            for (TopicPartition tp : c.assignment()) union.add(tp.partition());
                        }
                        boolean all = true;
                        for (int p = 0; p < partitions; p++) {
                            List<Long> offs = consumed.getOrDefault(p, List.of());
                            all &= new HashSet<>(offs).size() == want;
                        }
                        done = everyone && union.size() == partitions && owned == partitions && all;
                    }
                    Map<String, Object> assignments = new TreeMap<>();
                    for (Map.Entry<String, KafkaConsumer<byte[], byte[]>> e : live.entrySet()) {
                        List<Integer> mine = new ArrayList<>();
                        for (TopicPartition tp : e.getValue().assignment()) mine.add(tp.partition());
                        java.util.Collections.sort(mine);
                        assignments.put(e.getKey(), mine);
                    }
                    ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).describedGroups()
                            .get(group).get();
                    steps.add(obj("step", step, "done", done, "type", String.valueOf(d.type()),
                            "assignments", assignments));
                }
            } finally {
                for (KafkaConsumer<byte[], byte[]> c : live.values()) c.close(Duration.ofSeconds(5));
            }
            Map<String, Object> offsets = new TreeMap<>();
            for (Map.Entry<Integer, List<Long>> e : consumed.entrySet()) offsets.put(String.valueOf(e.getKey()), e.getValue());
            Map<String, Object> committed = new TreeMap<>();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get().entrySet()) {
                committed.put(String.valueOf(e.getKey().partition()), e.getValue() == null ? -1 : e.getValue().offset());
            }
            emit(obj("event", "migrate", "steps", steps, "consumed", offsets, "committed", committed,
                    "commits_refused", commitsRefused));
        }
    }

    static KafkaConsumer<byte[], byte[]> migrateMember(String bootstrap, String group, String topic, String name,
                                                       String protocol) {
        Properties p = common(bootstrap, "migrate-" + name);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put("group.protocol", protocol);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        if (protocol.equals("classic")) {
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        }
        KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        c.subscribe(List.of(topic));
        return c;
    }

    static void produceEach(KafkaProducer<byte[], byte[]> producer, String topic, int partitions, long from, long count)
            throws Exception {
        List<java.util.concurrent.Future<RecordMetadata>> fs = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            for (long i = from; i < from + count; i++) {
                fs.add(producer.send(new ProducerRecord<>(topic, p, bytes("k" + i), bytes("p" + p + "-" + i))));
            }
        }
        producer.flush();
        for (var f : fs) {
            f.get();
        }
    }

    static Map<String, Object> describeGroup(Admin admin, String group, String event) throws Exception {
        ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
        List<Object> members = new ArrayList<>();
        for (MemberDescription m : d.members()) {
            members.add(obj("member_id", m.consumerId(), "client_id", m.clientId(), "host", m.host(),
                    "group_instance_id", m.groupInstanceId().orElse(null),
                    "assignment", m.assignment().topicPartitions().stream()
                            .map(tp -> tp.topic() + ":" + tp.partition()).sorted().toList()));
        }
        Node coord = d.coordinator();
        return obj("event", event, "group_id", d.groupId(), "state", d.state().name(), "simple", d.isSimpleConsumerGroup(),
                "assignor", d.partitionAssignor(), "coordinator", coord == null ? null : coord.id(), "members", members);
    }

    static Map<String, Object> committedOffsets(Admin admin, String group) throws Exception {
        Map<String, Object> out = new TreeMap<>();
        for (var e : admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get().entrySet()) {
            OffsetAndMetadata om = e.getValue();
            out.put(e.getKey().topic() + ":" + e.getKey().partition(), om == null ? null : om.offset());
        }
        return out;
    }

    // ---------------------------------------------------------------------------------------- scenario 6

    /** What a consumer with {@code isolation} reads of {@code tps} from the beginning up to its end offsets
     *  (read_committed: the last stable offset), as partition -> values, plus those end offsets. */
    static Map<String, Object> readIsolated(String bootstrap, List<TopicPartition> tps, String isolation) {
        try (KafkaConsumer<byte[], byte[]> c = consumer(bootstrap, "java-check-" + isolation, null, isolation)) {
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps);
            Map<Integer, List<Object>> values = new TreeMap<>();
            for (TopicPartition tp : tps) values.put(tp.partition(), new ArrayList<>());
            for (ConsumerRecord<byte[], byte[]> r : readUntil(c, end)) {
                values.get(r.partition()).add(str(r.value()));
            }
            Map<String, Object> positions = new TreeMap<>();
            for (TopicPartition tp : tps) positions.put(String.valueOf(tp.partition()), c.position(tp));
            return obj("isolation", isolation, "end", byPartition(end), "positions", positions,
                    "values", stringKeys(values));
        }
    }

    /** Wait (bounded) until no transaction is open on {@code tps}: read_committed end offsets (the LSO) equal the
     *  read_uncommitted ones. The coordinator answers EndTxn before it writes the markers, as Kafka's does. */
    static void awaitStable(String bootstrap, List<TopicPartition> tps) throws Exception {
        try (KafkaConsumer<byte[], byte[]> rc = consumer(bootstrap, "java-check-lso", null, "read_committed");
             KafkaConsumer<byte[], byte[]> ru = consumer(bootstrap, "java-check-hw", null, "read_uncommitted")) {
            long deadline = System.currentTimeMillis() + DEADLINE_MS;
            while (!rc.endOffsets(tps).equals(ru.endOffsets(tps))) {
                if (System.currentTimeMillis() > deadline) throw new RuntimeException("no stable offsets for " + tps);
                Thread.sleep(50);  // polling interval of a bounded wait
            }
        }
    }

    /** The group's committed offsets once they have {@code n} partitions (or what there is at the deadline). */
    static Map<String, Object> awaitCommitted(Admin admin, String group, int n) throws Exception {
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        Map<String, Object> offsets = committedOffsets(admin, group);
        while (offsets.size() < n && System.currentTimeMillis() < deadline) {
            Thread.sleep(50);  // polling interval of a bounded wait
            offsets = committedOffsets(admin, group);
        }
        return offsets;
    }

    static void sendAll(KafkaProducer<byte[], byte[]> producer, String topic, int partitions, String prefix, int n)
            throws Exception {
        List<java.util.concurrent.Future<RecordMetadata>> fs = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            for (int i = 0; i < n; i++) {
                fs.add(producer.send(new ProducerRecord<>(topic, p, null, bytes(prefix + "-" + p + "-" + i))));
            }
        }
        producer.flush();
        for (var f : fs) f.get();
    }

    // A transactional producer: commit, abort, commit, three records per partition each; read back with
    // read_committed and read_uncommitted consumers (also while the aborted one is still open).
    static void txn(String bootstrap, String topic) throws Exception {
        List<TopicPartition> tps = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1));
        try (Admin admin = admin(bootstrap)) {
            createTopic(admin, topic, 2);
        }
        try (KafkaProducer<byte[], byte[]> producer = txnProducer(bootstrap, topic + "-tid")) {
            producer.initTransactions();
            emit(obj("event", "initialized"));
            producer.beginTransaction();
            sendAll(producer, topic, 2, "c1", 3);
            producer.commitTransaction();
            awaitStable(bootstrap, tps);
            producer.beginTransaction();
            sendAll(producer, topic, 2, "ab", 3);
            Map<String, Object> open = obj("event", "open");
            open.put("read_committed", readIsolated(bootstrap, tps, "read_committed"));
            open.put("read_uncommitted", readIsolated(bootstrap, tps, "read_uncommitted"));
            emit(open);
            producer.abortTransaction();
            producer.beginTransaction();
            sendAll(producer, topic, 2, "c2", 3);
            producer.commitTransaction();
            awaitStable(bootstrap, tps);
        }
        for (String isolation : List.of("read_committed", "read_uncommitted")) {
            Map<String, Object> m = readIsolated(bootstrap, tps, isolation);
            m.put("event", "read");
            emit(m);
        }
    }

    // Consume-transform-produce: a group member reads TOPIC (2 partitions, 10 plain records each), a
    // transactional producer writes the values upper-cased to TOPIC-out and commits the member's positions with
    // sendOffsetsToTransaction(offsets, consumer.groupMetadata()).
    static void txnConsumeTransformProduce(String bootstrap, String topic, String group) throws Exception {
        String out = topic + "-out";
        try (Admin admin = admin(bootstrap)) {
            createTopic(admin, topic, 2);
            createTopic(admin, out, 1);
            try (KafkaProducer<byte[], byte[]> plain = producer(bootstrap, "none")) {
                produceEach(plain, topic, 2, 0, 10);
            }
            try (KafkaConsumer<byte[], byte[]> c = consumer(bootstrap, "java-check-ctp", group, "read_committed");
                 KafkaProducer<byte[], byte[]> producer = txnProducer(bootstrap, topic + "-tid")) {
                producer.initTransactions();
                c.subscribe(List.of(topic));
                List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
                long deadline = System.currentTimeMillis() + DEADLINE_MS;
                while (got.size() < 20 && System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) got.add(r);
                }
                emit(obj("event", "consumed", "count", got.size()));
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (TopicPartition tp : c.assignment()) offsets.put(tp, new OffsetAndMetadata(c.position(tp)));
                ConsumerGroupMetadata gm = c.groupMetadata();
                emit(obj("event", "group_metadata", "group_id", gm.groupId(), "generation_id", gm.generationId(),
                        "member_id", gm.memberId()));
                for (boolean commit : new boolean[] {false, true}) {
                    producer.beginTransaction();
                    for (ConsumerRecord<byte[], byte[]> r : got) {
                        producer.send(new ProducerRecord<>(out, 0, null, bytes(str(r.value()).toUpperCase())));
                    }
                    producer.sendOffsetsToTransaction(offsets, gm);
                    emit(obj("event", "committed_before_end", "commit", commit,
                            "offsets", committedOffsets(admin, group)));
                    if (commit) producer.commitTransaction();
                    else producer.abortTransaction();
                    awaitStable(bootstrap, List.of(new TopicPartition(out, 0)));
                    emit(obj("event", "committed_after_end", "commit", commit,
                            "offsets", commit ? awaitCommitted(admin, group, 2) : committedOffsets(admin, group)));
                }
            }
        }
        for (String isolation : List.of("read_committed", "read_uncommitted")) {
            Map<String, Object> m = readIsolated(bootstrap, List.of(new TopicPartition(out, 0)), isolation);
            m.put("event", "output");
            emit(m);
        }
    }

    // Zombie fencing: a second producer with the same transactional.id fences the first; the first's commit
    // fails with ProducerFencedException and its open transaction is aborted.
    static void txnFence(String bootstrap, String topic) throws Exception {
        List<TopicPartition> tps = List.of(new TopicPartition(topic, 0));
        try (Admin admin = admin(bootstrap)) {
            createTopic(admin, topic, 1);
        }
        KafkaProducer<byte[], byte[]> zombie = txnProducer(bootstrap, topic + "-tid");
        try (KafkaProducer<byte[], byte[]> fresh = txnProducer(bootstrap, topic + "-tid")) {
            zombie.initTransactions();
            zombie.beginTransaction();
            zombie.send(new ProducerRecord<>(topic, 0, null, bytes("zombie"))).get();
            fresh.initTransactions();
            fresh.beginTransaction();
            fresh.send(new ProducerRecord<>(topic, 0, null, bytes("fresh"))).get();
            fresh.commitTransaction();
            awaitStable(bootstrap, tps);
            String error = null;
            try {
                zombie.commitTransaction();
            } catch (Exception e) {
                error = e.getClass().getSimpleName();
            }
            emit(obj("event", "zombie_commit", "error", error));
        } finally {
            zombie.close(Duration.ofSeconds(5));
        }
        for (String isolation : List.of("read_committed", "read_uncommitted")) {
            Map<String, Object> m = readIsolated(bootstrap, tps, isolation);
            m.put("event", "read");
            emit(m);
        }
    }

    // A segment file as Kafka's own record classes read it (FileRecords, as the broker and kafka-dump-log do):
    // every batch checked (ensureValid: sizes, magic, CRC) and, for control batches, the marker parsed with
    // ControlRecordType and EndTransactionMarker.
    static void dumpLog(String path) throws Exception {
        try (FileRecords records = FileRecords.open(new java.io.File(path))) {
            for (RecordBatch batch : records.batches()) {
                batch.ensureValid();
                Map<String, Object> m = obj("event", "batch", "base_offset", batch.baseOffset(),
                        "last_offset", batch.lastOffset(), "transactional", batch.isTransactional(),
                        "control", batch.isControlBatch(), "producer_id", batch.producerId(),
                        "producer_epoch", batch.producerEpoch(), "base_sequence", batch.baseSequence(),
                        "count", batch.countOrNull());
                if (batch.isControlBatch()) {
                    List<Object> markers = new ArrayList<>();
                    for (Record r : batch) {
                        ControlRecordType type = ControlRecordType.parse(r.key());
                        EndTransactionMarker marker = EndTransactionMarker.deserialize(r);
                        markers.add(obj("offset", r.offset(), "type", type.name(),
                                "marker_type", marker.controlType().name(),
                                "coordinator_epoch", marker.coordinatorEpoch()));
                    }
                    m.put("markers", markers);
                }
                emit(m);
            }
        }
    }

    // ------------------------------------------------------------------------------------------- helpers

    /** Poll until every partition's position reaches its target (or the deadline); returns what was read. */
    static List<ConsumerRecord<byte[], byte[]>> readUntil(KafkaConsumer<byte[], byte[]> c, Map<TopicPartition, Long> until) {
        List<ConsumerRecord<byte[], byte[]>> out = new ArrayList<>();
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        while (System.currentTimeMillis() < deadline) {
            boolean done = true;
            for (var e : until.entrySet()) {
                done &= c.position(e.getKey()) >= e.getValue();
            }
            if (done) break;
            for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                out.add(r);
            }
        }
        return out;
    }

    static Map<String, Object> byPartition(Map<TopicPartition, Long> m) {
        Map<String, Object> out = new TreeMap<>();
        for (var e : m.entrySet()) out.put(String.valueOf(e.getKey().partition()), e.getValue());
        return out;
    }

    static <V> Map<String, Object> stringKeys(Map<Integer, V> m) {
        Map<String, Object> out = new TreeMap<>();
        for (var e : m.entrySet()) out.put(String.valueOf(e.getKey()), e.getValue());
        return out;
    }

    static <T> Map<T, Boolean> toMap(Collection<T> xs) {
        Map<T, Boolean> m = new LinkedHashMap<>();
        for (T x : xs) m.put(x, true);
        return m;
    }

    static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static String str(byte[] b) {
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }

    static String hexOrNull(byte[] b) {
        if (b == null) return null;
        StringBuilder sb = new StringBuilder(b.length * 2);
        for (byte x : b) sb.append(Character.forDigit((x >> 4) & 0xf, 16)).append(Character.forDigit(x & 0xf, 16));
        return sb.toString();
    }

    // ---------------------------------------------------------------------------------------- tiny JSON

    // ------------------------------------------------------------------------------------------ ACLs

    static Properties plain(Properties p, String user) {
        p.put("security.protocol", "SASL_PLAINTEXT");
        p.put("sasl.mechanism", "PLAIN");
        p.put("sasl.jaas.config", "org.apache.kafka.common.security.plain.PlainLoginModule required username=\""
                + user + "\" password=\"" + user + "-secret\";");
        return p;
    }

    static Admin adminAs(String bootstrap, String user) {
        Properties p = plain(common(bootstrap, "java-check-acl-admin-" + user), user);
        p.put(AdminClientConfig.RETRIES_CONFIG, "2");
        return Admin.create(p);
    }

    static String sendAs(String bootstrap, String user, String topic) {
        Properties p = plain(common(bootstrap, "java-check-acl-producer-" + user), user);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "15000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "15000");
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p, new ByteArraySerializer(),
                new ByteArraySerializer())) {
            producer.send(new ProducerRecord<>(topic, 0, null, ("from " + user).getBytes(StandardCharsets.UTF_8))).get();
            return "ok";
        } catch (Exception e) {
            Throwable c = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
            return c.getClass().getSimpleName();
        }
    }

    static List<Object> bindingsOf(Collection<AclBinding> bindings) {
        List<Object> out = new ArrayList<>();
        for (AclBinding b : bindings) {
            out.add(obj("resource_type", b.pattern().resourceType().name(), "name", b.pattern().name(),
                    "pattern_type", b.pattern().patternType().name(), "principal", b.entry().principal(),
                    "host", b.entry().host(), "operation", b.entry().operation().name(),
                    "permission", b.entry().permissionType().name()));
        }
        return out;
    }

    static List<Object> names(Set<AclOperation> ops) {
        List<Object> out = new ArrayList<>();
        if (ops != null) {
            for (AclOperation op : new java.util.TreeSet<>(ops)) out.add(op.name());
        }
        return out;
    }

    /** As the super user ``admin``: create a topic and ACLs for ``alice``; then ``alice`` and ``bob`` produce; both
     *  describe ACLs; alice's authorized operations (KIP-430); the ACLs deleted. */
    static void acls(String bootstrap, String topic, String group) throws Exception {
        try (Admin admin = adminAs(bootstrap, "admin")) {
            createTopic(admin, topic, 1);
            ResourcePattern t = new ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL);
            ResourcePattern g = new ResourcePattern(ResourceType.GROUP, group, PatternType.PREFIXED);
            admin.createAcls(List.of(
                    new AclBinding(t, new AccessControlEntry("User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW)),
                    new AclBinding(g, new AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)),
                    new AclBinding(new ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL),
                            new AccessControlEntry("User:alice", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW))
            )).all().get();
            AclBindingFilter any = new AclBindingFilter(ResourcePatternFilter.ANY, AccessControlEntryFilter.ANY);
            emit(obj("event", "described", "acls", bindingsOf(admin.describeAcls(any).values().get())));
            AclBindingFilter match = new AclBindingFilter(
                    new ResourcePatternFilter(ResourceType.GROUP, group + "-1", PatternType.MATCH),
                    AccessControlEntryFilter.ANY);
            emit(obj("event", "matched", "acls", bindingsOf(admin.describeAcls(match).values().get())));
        }
        emit(obj("event", "produce", "alice", sendAs(bootstrap, "alice", topic), "bob", sendAs(bootstrap, "bob", topic)));
        for (String user : List.of("alice", "bob")) {
            try (Admin a = adminAs(bootstrap, user)) {
                String described;
                try {
                    described = "ok:" + a.describeAcls(AclBindingFilter.ANY).values().get().size();
                } catch (ExecutionException e) {
                    described = e.getCause().getClass().getSimpleName();
                }
                String topicOps;
                try {
                    TopicDescription d = a.describeTopics(List.of(topic),
                            new DescribeTopicsOptions().includeAuthorizedOperations(true)).allTopicNames().get().get(topic);
                    topicOps = String.join(",", names(d.authorizedOperations()).stream().map(String::valueOf).toList());
                } catch (ExecutionException e) {
                    topicOps = e.getCause().getClass().getSimpleName();
                }
                Set<AclOperation> clusterOps = a.describeCluster(
                        new DescribeClusterOptions().includeAuthorizedOperations(true)).authorizedOperations().get();
                emit(obj("event", "as", "user", user, "describe_acls", described, "topic_ops", topicOps,
                        "cluster_ops", names(clusterOps)));
            }
        }
        try (Admin admin = adminAs(bootstrap, "admin")) {
            AclBindingFilter alices = new AclBindingFilter(ResourcePatternFilter.ANY,
                    new AccessControlEntryFilter("User:alice", null, AclOperation.ANY, AclPermissionType.ANY));
            emit(obj("event", "deleted", "acls", bindingsOf(admin.deleteAcls(List.of(alices)).all().get())));
            emit(obj("event", "left", "acls", bindingsOf(admin.describeAcls(AclBindingFilter.ANY).values().get())));
        }
    }

    static Map<String, Object> obj(Object... kv) {
        return TestKit.obj(kv);
    }

    static void emit(Map<String, Object> m) {
        TestKit.emit(m);
    }
}
