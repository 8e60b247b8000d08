/* tidelog bench: paced producer that measures per-message produce latency (send -> delivery report).
 *
 *   latency_producer -b HOST:PORT -t TOPIC [-p PARTITION] -s SIZE -a ACKS -r MSGS_PER_S -d SECONDS
 *                    [-w WARMUP_SECONDS] [-X key=value ...]
 *
 * Sends at a fixed rate (absolute-deadline pacing with clock_nanosleep, so it sleeps rather than spins),
 * records send->delivery-report latency of every message after the warm-up, and prints one JSON line:
 *   {"sent":N,"delivered":N,"failed":N,"seconds":S,"p50_ms":..,"p90_ms":..,"p99_ms":..,"p999_ms":..,"max_ms":..}
 * Built by bench/loadgen/build_rdkafka_perf.sh against librdkafka; our own code, not part of librdkafka.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include "rdkafka.h" /* librdkafka-dev: <librdkafka/rdkafka.h> */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t run = 1;
static void on_signal(int sig) { (void)sig; run = 0; }

static int64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

typedef struct {
        int64_t *lat_ns;
        size_t n, cap;
        int64_t delivered, failed;
        int64_t measure_from_ns;
        char first_error[256];
} stats_t;

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
        stats_t *st = opaque;
        int64_t sent = (int64_t)(intptr_t)m->_private;
        (void)rk;
        if (m->err) {
                if (!st->failed)
                        snprintf(st->first_error, sizeof(st->first_error), "%s", rd_kafka_err2str(m->err));
                st->failed++;
                return;
        }
        st->delivered++;
        if (sent >= st->measure_from_ns && st->n < st->cap)
                st->lat_ns[st->n++] = now_ns() - sent;
}

static int cmp64(const void *a, const void *b) {
        int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
        return x < y ? -1 : x > y;
}

static double pct(const int64_t *v, size_t n, double p) {
        if (!n) return -1;
        size_t idx = (size_t)(p / 100.0 * (double)n + 0.999999);
        if (idx < 1) idx = 1;
        if (idx > n) idx = n;
        return (double)v[idx - 1] / 1e6;
}

int main(int argc, char **argv) {
        const char *brokers = NULL, *topic = NULL, *acks = "1";
        int partition = RD_KAFKA_PARTITION_UA, size = 100, opt;
        double rate = 5000, seconds = 10, warmup = 1;
        char errstr[512];
        rd_kafka_conf_t *conf = rd_kafka_conf_new();

        while ((opt = getopt(argc, argv, "b:t:p:s:a:r:d:w:X:")) != -1) {
                switch (opt) {
                case 'b': brokers = optarg; break;
                case 't': topic = optarg; break;
                case 'p': partition = atoi(optarg); break;
                case 's': size = atoi(optarg); break;
                case 'a': acks = optarg; break;
                case 'r': rate = atof(optarg); break;
                case 'd': seconds = atof(optarg); break;
                case 'w': warmup = atof(optarg); break;
                case 'X': {
                        char *eq = strchr(optarg, '=');
                        if (!eq) { fprintf(stderr, "-X needs key=value\n"); return 2; }
                        *eq = '\0';
                        if (rd_kafka_conf_set(conf, optarg, eq + 1, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
                                fprintf(stderr, "%s\n", errstr);
                                return 2;
                        }
                        break;
                }
                default: fprintf(stderr, "bad option\n"); return 2;
                }
        }
        if (!brokers || !topic || rate <= 0 || seconds <= 0) {
                fprintf(stderr, "usage: %s -b H:P -t TOPIC [-p N] -s SIZE -a ACKS -r RATE -d SECONDS\n", argv[0]);
                return 2;
        }
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);

        stats_t st = {0};
        st.cap = (size_t)(rate * seconds) + 16;
        st.lat_ns = calloc(st.cap, sizeof(int64_t));
        if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers, errstr, sizeof(errstr)) ||
            rd_kafka_conf_set(conf, "acks", acks, errstr, sizeof(errstr))) {
                fprintf(stderr, "%s\n", errstr);
                return 2;
        }
        rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
        rd_kafka_conf_set_opaque(conf, &st);
        rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
        if (!rk) { fprintf(stderr, "%s\n", errstr); return 1; }
        rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);

        /* Wait for metadata so connection set-up is not measured. */
        const struct rd_kafka_metadata *md = NULL;
        if (rd_kafka_metadata(rk, 0, rkt, &md, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR)
                rd_kafka_metadata_destroy(md);

        char *payload = malloc((size_t)size);
        for (int i = 0; i < size; i++) payload[i] = (char)('a' + i % 26);

        int64_t interval = (int64_t)(1e9 / rate);
        int64_t t0 = now_ns();
        int64_t end = t0 + (int64_t)(seconds * 1e9);
        st.measure_from_ns = t0 + (int64_t)(warmup * 1e9);
        int64_t sent = 0;
        struct timespec due_ts;
        while (run) {
                int64_t due = t0 + sent * interval;
                if (due >= end) break;
                due_ts.tv_sec = due / 1000000000LL;
                due_ts.tv_nsec = due % 1000000000LL;
                while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due_ts, NULL) == EINTR && run) {}
                int64_t ts = now_ns();
                if (rd_kafka_produce(rkt, partition, RD_KAFKA_MSG_F_COPY, payload, (size_t)size, NULL, 0,
                                     (void *)(intptr_t)ts) == -1) {
                        if (rd_kafka_last_error() == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                                rd_kafka_poll(rk, 10);
                                continue;
                        }
                        fprintf(stderr, "produce failed: %s\n", rd_kafka_err2str(rd_kafka_last_error()));
                        break;
                }
                sent++;
                rd_kafka_poll(rk, 0);
        }
        rd_kafka_flush(rk, 30000);
        double secs = (double)(now_ns() - t0) / 1e9;
        qsort(st.lat_ns, st.n, sizeof(int64_t), cmp64);
        printf("{\"sent\": %" PRId64 ", \"delivered\": %" PRId64 ", \"failed\": %" PRId64
               ", \"seconds\": %.3f, \"samples\": %zu, \"p50_ms\": %.3f, \"p90_ms\": %.3f, \"p99_ms\": %.3f"
               ", \"p999_ms\": %.3f, \"max_ms\": %.3f, \"first_error\": \"%s\"}\n",
               sent, st.delivered, st.failed, secs, st.n, pct(st.lat_ns, st.n, 50), pct(st.lat_ns, st.n, 90),
               pct(st.lat_ns, st.n, 99), pct(st.lat_ns, st.n, 99.9), pct(st.lat_ns, st.n, 100), st.first_error);
        rd_kafka_topic_destroy(rkt);
        rd_kafka_destroy(rk);
        return st.failed ? 3 : 0;
}
