// The Java consume-transform-produce client of the txn workload (tests/jepsen/txnload.py's TxnClient in
// kafka-clients): built against kafka-clients 4.3 (the jars of tests/broker/txn/test_tv2_java.py), so it runs transactions
// version 2 by itself (KIP-890 part 2: EndTxn v5 bumps the epoch per transaction, Produce v12 / TxnOffsetCommit v5
// add partitions implicitly). Compiled together with JepsenClient.java and tests/java/TestKit.java (the output and
// client settings the Java test clients share).
//
//   java -cp <jars>:<classes> JepsenTxnClient BOOTSTRAP TOPIC PARTITIONS TXN_ID GROUP VALUE_BASE ABORT_RATE SEED
//
// A session: a transactional producer (TXN_ID, kept across sessions so a new one fences the old) and a
// read_committed consumer of GROUP assigned every partition at the group's committed offsets (an "assign" op). A
// "txn" op: begin, one or two polls, one to four sends of new unique values to random partitions,
// sendOffsetsToTransaction of what was polled, then commit -- or abort on purpose (ABORT_RATE). Outcomes, as in
// txnload.py: ok once commitTransaction returned (the sends' offsets from their futures); fail when abortTransaction
// returned (on purpose, or after an abortable error); info on anything else (a timeout, fencing, a fatal error),
// after which the session ends and a new one (new process) starts. A txn starts only after the runner has
// recorded its invoke ("g PID" on stdin), as JepsenClient's sends do. Stops at stdin EOF.

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class JepsenTxnClient {
    /** "a" on stdin: the transaction in progress (or the next) is aborted on purpose when it reaches its end. */
    static final java.util.concurrent.atomic.AtomicBoolean ABORT_NEXT = new java.util.concurrent.atomic.AtomicBoolean();

    /** The outcome of the transaction is unknown: record info, end the session. */
    static final class Unknown extends Exception {
        private static final long serialVersionUID = 1L;

        Unknown(String why) {
            super(why);
        }
    }

    public static void main(String[] args) throws Exception {
        JepsenClient.readStdin(line -> {
            if (line.equals("a")) ABORT_NEXT.set(true);
        });
        String bootstrap = args[0], topic = args[1], tid = args[3], group = args[4];
        int partitions = Integer.parseInt(args[2]);
        long[] values = {Long.parseLong(args[5])};
        double abortRate = Double.parseDouble(args[6]);
        Random rng = new Random(Long.parseLong(args[7]));
        while (!JepsenClient.STOP.get()) session(bootstrap, topic, partitions, tid, group, values, abortRate, rng);
        TestKit.println("{\"done\":true}");
        System.exit(0);
    }

    static KafkaProducer<String, String> producer(String bootstrap, String tid) {
        Properties p = TestKit.delivery(JepsenClient.common(bootstrap), "all", 5, 30000, 60000);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, tid);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "30000");
        p.put(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, "200");
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static KafkaConsumer<String, String> consumer(String bootstrap, String group) {
        Properties p = TestKit.manualCommit(JepsenClient.common(bootstrap), group, "read_committed");
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "200");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "50");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }

    static void session(String bootstrap, String topic, int partitions, String tid, String group, long[] values,
                        double abortRate, Random rng) {
        int pid = JepsenClient.PIDS.getAndIncrement();
        String v = "{\"role\":\"producer\",\"client\":\"java4\",\"transactional\":true,\"isolation\":"
                + "\"read_committed\",\"mode\":\"assign\",\"group\":" + TestKit.str(group) + "}";
        JepsenClient.emit(pid, "invoke", "open", v, null);
        KafkaProducer<String, String> prod = null;
        KafkaConsumer<String, String> cons = null;
        try {
            prod = producer(bootstrap, tid);
            cons = consumer(bootstrap, group);
            while (true) {  // initTransactions fences a previous instance and resolves its open transaction
                try {
                    prod.initTransactions();
                    break;
                } catch (org.apache.kafka.common.errors.TimeoutException e) {
                    if (JepsenClient.STOP.get()) throw e;
                }
            }
            JepsenClient.emit(pid, "ok", "open", v, null);
        } catch (Exception e) {
            JepsenClient.emit(pid, "fail", "open", v, e.toString());
            close(prod, cons);
            sleepQuietly(500);  // the next session's backoff (the cluster may be mid-fault)
            return;
        }
        List<TopicPartition> parts = new ArrayList<>();
        for (int i = 0; i < partitions; i++) parts.add(new TopicPartition(topic, i));
        try {
            if (!rewind(cons, parts, pid)) return;
            while (!JepsenClient.STOP.get()) {
                if (!txn(prod, cons, parts, pid, topic, partitions, group, values, abortRate, rng)) return;
            }
        } finally {
            close(prod, cons);
        }
    }

    static void close(KafkaProducer<String, String> prod, KafkaConsumer<String, String> cons) {
        Thread t = new Thread(() -> {  // a close may block on unreachable brokers: not on the session's thread
            try {
                if (prod != null) prod.close(Duration.ofSeconds(5));
            } catch (Exception e) {
                // replaced anyway
            }
            try {
                if (cons != null) cons.close(Duration.ofSeconds(5));
            } catch (Exception e) {
                // replaced anyway
            }
        });
        t.setDaemon(true);
        t.start();
    }

    static void sleepQuietly(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** Assign every partition at the group's committed offsets (the transactions' committed progress). */
    static boolean rewind(KafkaConsumer<String, String> cons, List<TopicPartition> parts, int pid) {
        Map<String, Long> pos = JepsenClient.committed(cons, parts);
        cons.assign(parts);
        for (TopicPartition tp : parts) {
            Long o = pos.get(tp.topic() + "/" + tp.partition());
            if (o == null) cons.seekToBeginning(List.of(tp));
            else cons.seek(tp, o);
        }
        JepsenClient.assigned(pid, pos, false);
        return true;
    }

    static boolean txn(KafkaProducer<String, String> prod, KafkaConsumer<String, String> cons,
                       List<TopicPartition> parts, int pid, String topic, int partitions, String group,
                       long[] values, double abortRate, Random rng) {
        int polls = 1 + rng.nextInt(2), sends = 1 + rng.nextInt(4);
        boolean abort = rng.nextDouble() < abortRate;
        StringBuilder inv = new StringBuilder("[");
        int[] sendPart = new int[sends];
        long[] sendValue = new long[sends];
        for (int i = 0; i < polls; i++) inv.append(i == 0 ? "" : ",").append("[\"poll\"]");
        for (int i = 0; i < sends; i++) {
            sendPart[i] = rng.nextInt(partitions);
            sendValue[i] = values[0]++;
            inv.append(",[\"send\",").append(TestKit.str(topic + "/" + sendPart[i])).append(',')
                    .append(sendValue[i]).append(']');
        }
        inv.append(",[\"offsets\",").append(TestKit.str(group)).append(",null]]");
        String invoke = inv.toString();
        JepsenClient.emit(pid, "invoke", "txn", invoke, null);
        try {
            while (!JepsenClient.go(pid).tryAcquire(1, TimeUnit.SECONDS)) {
                if (JepsenClient.STOP.get()) {
                    JepsenClient.emit(pid, "fail", "txn", invoke, "stopped before the transaction");
                    return false;
                }
            }
        } catch (InterruptedException e) {
            return false;
        }
        // the torn fault's N+1 (tornrun.one_fault; "a" is read before this invoke's "g", so the flag is known
        // here), as txnload.py's: one send (one Produce: a second one in flight when the late EndTxn lands makes
        // the coordinator answer it CONCURRENT_TRANSACTIONS instead of judging its epoch), flushed before the
        // offsets. Aborted with its sends still unsent, its Produce never left, the next transaction's first
        // Produce took the late EndTxn, and the test repeated the fault (~10 s each) to see N+1 aborted whole
        boolean torn = ABORT_NEXT.get();
        if (torn) sends = 1;  // the invoke's other sends are never made: the fail completion covers them
        List<String> done = new ArrayList<>();
        Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        try {
            prod.beginTransaction();
            for (int i = 0; i < polls; i++) {
                Map<String, StringBuilder> byKey = new TreeMap<>();
                for (ConsumerRecord<String, String> r : cons.poll(Duration.ofMillis(200))) {
                    String k = r.topic() + "/" + r.partition();
                    StringBuilder sb = byKey.computeIfAbsent(k, x -> new StringBuilder());
                    if (sb.length() > 0) sb.append(',');
                    sb.append('[').append(r.offset()).append(',').append(Long.parseLong(r.value())).append(']');
                    next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                done.add("[\"poll\"," + JepsenClient.recMap(byKey) + "]");
            }
            for (int i = 0; i < sends; i++) {
                String val = Long.toString(sendValue[i]);
                futures.add(prod.send(new ProducerRecord<>(topic, sendPart[i], val, val)));
            }
            // the torn fault's N+1: its record reaches the log before the abort (flushed before the offsets)
            if (torn) prod.flush();
            if (!next.isEmpty()) prod.sendOffsetsToTransaction(next, cons.groupMetadata());
            if (ABORT_NEXT.getAndSet(false) || abort) throw new KafkaException("aborted-on-purpose");
            prod.commitTransaction();
        } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException
                 | UnsupportedVersionException | InvalidProducerEpochException e) {
            JepsenClient.emit(pid, "info", "txn", invoke, e.toString());  // fatal for this producer
            return false;
        } catch (org.apache.kafka.common.errors.TimeoutException e) {
            JepsenClient.emit(pid, "info", "txn", invoke, e.toString());  // the commit may have happened
            return false;
        } catch (KafkaException e) {
            String why = "aborted-on-purpose".equals(e.getMessage()) ? "aborted-on-purpose" : e.toString();
            try {
                prod.abortTransaction();
            } catch (Exception e2) {
                JepsenClient.emit(pid, "info", "txn", invoke, why + "; abort failed: " + e2);
                return false;
            }
            JepsenClient.emit(pid, "fail", "txn", invoke, why);
            return rewind(cons, parts, pid);
        }
        StringBuilder ok = new StringBuilder("[");
        for (String d : done) ok.append(ok.length() > 1 ? "," : "").append(d);
        for (int i = 0; i < sends; i++) {
            String off = "null";
            try {
                RecordMetadata md = futures.get(i).get(1, TimeUnit.SECONDS);  // complete: the commit flushed them
                if (md.hasOffset() && md.offset() >= 0) off = Long.toString(md.offset());
            } catch (Exception e) {
                // committed without its offset known
            }
            ok.append(",[\"send\",").append(TestKit.str(topic + "/" + sendPart[i])).append(",[").append(off)
                    .append(',').append(sendValue[i]).append("]]");
        }
        StringBuilder offs = new StringBuilder("{");
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : next.entrySet()) {
            if (offs.length() > 1) offs.append(',');
            offs.append(TestKit.str(e.getKey().topic() + "/" + e.getKey().partition())).append(':')
                    .append(e.getValue().offset());
        }
        ok.append(",[\"offsets\",").append(TestKit.str(group)).append(',').append(offs).append("}]]");
        JepsenClient.emit(pid, "ok", "txn", ok.toString(), null);
        return true;
    }
}
