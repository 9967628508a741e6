/*
 * kafka-mock: librdkafka's in-memory mock Kafka cluster as a controllable process.
 *
 * Usage: kafka-mock [BROKERS] [--topic NAME:PARTITIONS[:REPLICATION]]...
 *
 * Prints exactly one line "bootstrap host:port,..." on stdout once the cluster is ready, then
 * reads one command per line on stdin and answers each with one line, "ok" or "error <text>":
 *
 *   create <topic> <partitions> [replication]   create a topic
 *   down <broker_id> | up <broker_id>           disconnect a broker / accept connections again
 *   down-all | up-all                           the same for every broker
 *   rtt <broker_id> <ms>                        add round-trip latency to a broker
 *   quit                                        exit
 *
 * Brokers are numbered 1..BROKERS. A broker that is down keeps its data (unlike a restart of
 * this process, which loses everything). Exits with status 0 on "quit", stdin EOF, SIGTERM or
 * SIGINT, at once (every client connection is closed first). Diagnostics go to stderr.
 *
 * Build: gcc -O2 -o kafka-mock kafka-mock.c -lrdkafka
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#define MAX_BROKERS 64
#define LINE_MAX_LEN 4096

static volatile sig_atomic_t stop_signal = 0;

static void on_signal(int sig) { stop_signal = sig; }

/* Parses a whole decimal integer in [min, max]; returns 0 on success. */
static int parse_int(const char *s, long min, long max, int *out) {
        char *end;
        long v;
        if (!s || !*s)
                return -1;
        errno = 0;
        v = strtol(s, &end, 10);
        if (errno || *end || v < min || v > max)
                return -1;
        *out = (int)v;
        return 0;
}

static void reply(rd_kafka_resp_err_t err) {
        if (err)
                printf("error %s: %s\n", rd_kafka_err2name(err), rd_kafka_err2str(err));
        else
                printf("ok\n");
        fflush(stdout);
}

static void reply_usage(const char *text) {
        printf("error %s\n", text);
        fflush(stdout);
}

/* Runs one command line. Returns 1 when the program should exit. */
static int run_command(rd_kafka_mock_cluster_t *mc, int brokers, char *line) {
        char *argv[5];
        int argc = 0, id, n, repl;
        char *save = NULL, *tok;

        for (tok = strtok_r(line, " \t\r", &save); tok && argc < 5;
             tok = strtok_r(NULL, " \t\r", &save))
                argv[argc++] = tok;
        if (tok) {
                reply_usage("too many arguments");
                return 0;
        }
        if (argc == 0) {
                reply_usage("empty command");
                return 0;
        }

        if (!strcmp(argv[0], "quit") && argc == 1) {
                reply(RD_KAFKA_RESP_ERR_NO_ERROR);
                return 1;
        } else if (!strcmp(argv[0], "create") && (argc == 3 || argc == 4)) {
                repl = 1;
                if (parse_int(argv[2], 1, 100000, &n) ||
                    (argc == 4 && parse_int(argv[3], 1, brokers, &repl)))
                        reply_usage("usage: create <topic> <partitions 1..100000> "
                                    "[replication 1..brokers]");
                else
                        reply(rd_kafka_mock_topic_create(mc, argv[1], n, repl));
        } else if ((!strcmp(argv[0], "down") || !strcmp(argv[0], "up")) && argc == 2) {
                if (parse_int(argv[1], 1, brokers, &id))
                        reply_usage("usage: down|up <broker_id 1..brokers>");
                else if (argv[0][0] == 'd')
                        reply(rd_kafka_mock_broker_set_down(mc, id));
                else
                        reply(rd_kafka_mock_broker_set_up(mc, id));
        } else if (!strcmp(argv[0], "down-all") && argc == 1) {
                reply(rd_kafka_mock_broker_set_down(mc, -1));
        } else if (!strcmp(argv[0], "up-all") && argc == 1) {
                reply(rd_kafka_mock_broker_set_up(mc, -1));
        } else if (!strcmp(argv[0], "rtt") && argc == 3) {
                if (parse_int(argv[1], 1, brokers, &id) || parse_int(argv[2], 0, INT_MAX, &n))
                        reply_usage("usage: rtt <broker_id 1..brokers> <ms>");
                else
                        reply(rd_kafka_mock_broker_set_rtt(mc, id, n));
        } else {
                reply_usage("unknown command (create, down, up, down-all, up-all, rtt, quit)");
        }
        return 0;
}

/* "--topic name:partitions[:replication]" at startup. Returns 0 on success. */
static int create_initial_topic(rd_kafka_mock_cluster_t *mc, int brokers, char *spec) {
        char *colon = strchr(spec, ':'), *colon2;
        int partitions, repl = 1;
        rd_kafka_resp_err_t err;

        if (!colon || colon == spec)
                return -1;
        *colon = '\0';
        colon2 = strchr(colon + 1, ':');
        if (colon2)
                *colon2 = '\0';
        if (parse_int(colon + 1, 1, 100000, &partitions) ||
            (colon2 && parse_int(colon2 + 1, 1, brokers, &repl)))
                return -1;
        err = rd_kafka_mock_topic_create(mc, spec, partitions, repl);
        if (err) {
                fprintf(stderr, "kafka-mock: topic %s: %s\n", spec, rd_kafka_err2str(err));
                return -1;
        }
        return 0;
}

int main(int argc, char **argv) {
        char errstr[512], buf[LINE_MAX_LEN];
        size_t used = 0;
        int brokers = 3, i, done = 0, status = 0, discarding = 0;
        rd_kafka_conf_t *conf;
        rd_kafka_t *rk;
        rd_kafka_mock_cluster_t *mc;
        struct sigaction sa;
        sigset_t blocked, unblocked;

        /* Block the stop signals everywhere (librdkafka's threads inherit this mask) and take
         * them only inside ppoll(), so a signal can never slip in between check and wait. */
        sigemptyset(&blocked);
        sigaddset(&blocked, SIGTERM);
        sigaddset(&blocked, SIGINT);
        sigprocmask(SIG_BLOCK, &blocked, &unblocked);
        sigdelset(&unblocked, SIGTERM);
        sigdelset(&unblocked, SIGINT);
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_signal;
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);

        for (i = 1; i < argc; i++) {
                if (!strcmp(argv[i], "--topic") && i + 1 < argc) {
                        i++; /* handled once the cluster exists */
                } else if (parse_int(argv[i], 1, MAX_BROKERS, &brokers)) {
                        fprintf(stderr, "usage: %s [brokers 1..%d] [--topic name:partitions"
                                        "[:replication]]...\n", argv[0], MAX_BROKERS);
                        return 2;
                }
        }

        conf = rd_kafka_conf_new();
        if (rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof(errstr))) {
                fprintf(stderr, "kafka-mock: %s\n", errstr);
                return 1;
        }
        rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
        if (!rk) {
                fprintf(stderr, "kafka-mock: rd_kafka_new: %s\n", errstr);
                return 1;
        }
        mc = rd_kafka_mock_cluster_new(rk, brokers);
        if (!mc) {
                fprintf(stderr, "kafka-mock: rd_kafka_mock_cluster_new failed\n");
                rd_kafka_destroy(rk);
                return 1;
        }

        for (i = 1; i < argc; i++) {
                if (!strcmp(argv[i], "--topic") && create_initial_topic(mc, brokers, argv[++i])) {
                        fprintf(stderr, "kafka-mock: bad --topic (want name:partitions"
                                        "[:replication])\n");
                        status = 2;
                        goto out;
                }
        }

        printf("bootstrap %s\n", rd_kafka_mock_cluster_bootstraps(mc));
        fflush(stdout);

        while (!done && !stop_signal) {
                struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
                ssize_t r;
                char *nl;

                if (ppoll(&pfd, 1, NULL, &unblocked) < 0) {
                        if (errno == EINTR)
                                continue;
                        perror("kafka-mock: ppoll");
                        status = 1;
                        break;
                }
                r = read(STDIN_FILENO, buf + used, sizeof(buf) - 1 - used);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0)
                        break; /* EOF (the parent went away) or a read error */
                used += (size_t)r;
                buf[used] = '\0';
                while (!done && (nl = memchr(buf, '\n', used))) {
                        size_t len = (size_t)(nl - buf) + 1;
                        *nl = '\0';
                        if (discarding)
                                discarding = 0; /* the tail of an over-long line */
                        else
                                done = run_command(mc, brokers, buf);
                        memmove(buf, buf + len, used - len);
                        used -= len;
                        buf[used] = '\0';
                }
                if (used == sizeof(buf) - 1) {
                        if (!discarding)
                                reply_usage("line too long");
                        discarding = 1;
                        used = 0;
                }
        }

out:
        /* rd_kafka_mock_cluster_destroy() in librdkafka 2.0.2 often blocks for a second: the mock thread
         * only sees the terminate request when its 1 s poll times out. Nothing here outlives the process,
         * so close every connection and listener (clients see a disconnect) and exit without it. */
        rd_kafka_mock_broker_set_down(mc, -1);
        fflush(stdout);
        fflush(stderr);
        _exit(status);
}
