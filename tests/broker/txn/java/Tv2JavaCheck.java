// A Kafka 4.x Java transactional producer against tidelog (tests/broker/txn/test_tv2_java.py): with transaction.version 2
// finalized it runs transactions v2 by itself (EndTxn v5, Produce v12, TxnOffsetCommit v5, no AddPartitionsToTxn).
// Usage: Tv2JavaCheck BOOTSTRAP TOPIC TRANSACTIONAL_ID GROUP. Prints one JSON line per transaction, then "done".
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class Tv2JavaCheck {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], tid = args[2], group = args[3];
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, tid);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 30000);
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 30000);
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 10000);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            boolean[] commits = {true, false, true};
            for (int i = 0; i < commits.length; i++) {
                producer.beginTransaction();
                for (int part = 0; part < 2; part++) {
                    producer.send(new ProducerRecord<>(topic, part, null, ("t" + i + "-p" + part).getBytes())).get();
                }
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                offsets.put(new TopicPartition(topic, 0), new OffsetAndMetadata(10L * (i + 1)));
                producer.sendOffsetsToTransaction(offsets, new ConsumerGroupMetadata(group));
                if (commits[i]) {
                    producer.commitTransaction();
                } else {
                    producer.abortTransaction();
                }
                System.out.println("{\"event\": \"txn\", \"i\": " + i + ", \"commit\": " + commits[i] + "}");
            }
        }
        System.out.println("{\"event\": \"done\"}");
    }
}
