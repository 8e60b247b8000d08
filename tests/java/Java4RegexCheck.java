// Issue 27 (cg27): one Java 4.3 consumer (kafka-clients 4.3.0, group.protocol=consumer) subscribed with a
// broker-side regular expression (KafkaConsumer.subscribe(SubscriptionPattern), KIP-848's RE2J pattern).
//
//   java Java4RegexCheck BOOTSTRAP GROUP PATTERN
//
// Polls until stdin says "stop" (or closes); after each poll that read records it commits them (commitSync) and
// prints one JSON line: {"event":"batch","epoch":E,"assignment":["topic-p",...],"values":[...]}, E being the member
// epoch (groupMetadata().generationId()); a change of assignment prints {"event":"assigned",...} the same way.
// Errors are printed as {"event":"error","error":"..."} and end the program.

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public final class Java4RegexCheck {
    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            if (ch == '"' || ch == '\\') b.append('\\').append(ch);
            else if (ch < 0x20) b.append(String.format("\\u%04x", (int) ch));
            else b.append(ch);
        }
        return b.append('"').toString();
    }

    static String list(List<String> xs) {
        List<String> q = new ArrayList<>();
        for (String x : xs) q.add(quote(x));
        return "[" + String.join(",", q) + "]";
    }

    static synchronized void emit(String event, int epoch, List<String> assignment, List<String> values) {
        System.out.println("{\"event\":" + quote(event) + ",\"epoch\":" + epoch + ",\"assignment\":"
                + list(assignment) + ",\"values\":" + list(values) + "}");
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, args[1]);
        p.put("group.protocol", "consumer");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.METADATA_MAX_AGE_CONFIG, "1000");
        AtomicBoolean stop = new AtomicBoolean(false);
        Thread stdin = new Thread(() -> {
            try {
                java.io.BufferedReader r = new java.io.BufferedReader(new java.io.InputStreamReader(System.in));
                String line;
                while ((line = r.readLine()) != null && !line.trim().equals("stop")) { }
            } catch (Exception e) { }
            stop.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p, new StringDeserializer(),
                new StringDeserializer())) {
            c.subscribe(new SubscriptionPattern(args[2]));
            List<String> last = null;
            while (!stop.get()) {
                ConsumerRecords<String, String> rs = c.poll(Duration.ofMillis(100));
                TreeSet<String> now = new TreeSet<>();
                for (TopicPartition tp : c.assignment()) now.add(tp.topic() + "-" + tp.partition());
                List<String> assignment = new ArrayList<>(now);
                int epoch = c.groupMetadata().generationId();
                if (!assignment.equals(last)) {
                    emit("assigned", epoch, assignment, List.of());
                    last = assignment;
                }
                if (rs.isEmpty()) continue;
                List<String> values = new ArrayList<>();
                for (ConsumerRecord<String, String> r : rs) values.add(r.value());
                c.commitSync();
                emit("batch", c.groupMetadata().generationId(), assignment, values);
            }
        } catch (Exception e) {
            System.out.println("{\"event\":\"error\",\"epoch\":-1,\"assignment\":[],\"values\":[],\"error\":"
                    + quote(e.toString()) + "}");
            System.out.flush();
        }
    }
}
