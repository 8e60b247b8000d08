// bench/share_bench.py --java: one Java 4.3 consumer reading N records of a topic from the beginning, timed from its
// first record to its last (group join excluded). Prints "first" when the first record arrives (the bench reads the
// broker's CPU then) and, at the end, "rate <records/s> polls <n>".
//
//   java -cp ... ShareBench classic|share BOOTSTRAP TOPIC N MAX_POLL_RECORDS
//
// classic: KafkaConsumer, group.protocol=classic, auto.offset.reset=earliest, auto commit;
// share:   KafkaShareConsumer, implicit acknowledgement (every poll accepts the previous poll's records).

import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.UUID;
import java.util.function.Function;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class ShareBench {
    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1], topic = args[2];
        long n = Long.parseLong(args[3]);
        String maxPoll = args[4];
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, mode + "-java-" + UUID.randomUUID().toString().substring(0, 6));
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, maxPoll);
        ByteArrayDeserializer d = new ByteArrayDeserializer();
        if (mode.equals("classic")) {
            p.put("group.protocol", "classic");
            p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p, d, d)) {
                c.subscribe(List.of(topic));
                consume(c::poll, n);
            }
        } else {
            p.put("share.acknowledgement.mode", "implicit");
            try (KafkaShareConsumer<byte[], byte[]> c = new KafkaShareConsumer<>(p, d, d)) {
                c.subscribe(List.of(topic));
                consume(c::poll, n);
                c.commitSync(Duration.ofSeconds(30));
            }
        }
    }

    // Poll until n records arrived, print "first" at the first one, then the rate from there.
    static void consume(Function<Duration, ConsumerRecords<byte[], byte[]>> poll, long n) {
        long got = 0, polls = 0, t0 = 0;
        while (got < n) {
            ConsumerRecords<byte[], byte[]> rs = poll.apply(Duration.ofSeconds(1));
            if (rs.count() > 0 && t0 == 0) {
                t0 = System.nanoTime();
                System.out.println("first");
                System.out.flush();
            }
            got += rs.count();
            polls++;
        }
        report(got, polls, t0);
    }

    static void report(long got, long polls, long t0) {
        double s = (System.nanoTime() - t0) / 1e9;
        System.out.println("rate " + (got / s) + " polls " + polls);
        System.out.flush();
    }
}
