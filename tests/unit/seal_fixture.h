/* SPDX-License-Identifier: MIT */
/*
 * Two sealed conns for the unit tests of sealed connections
 * (daemon/base/conn.c with seal.h; test_conn_seal.c and
 * test_conn_seal_tamper.c): S (accepting) and C (dialling) on one private
 * loop, each on a socket pair whose other end the fixture holds; it
 * relays the bytes between the two, keeps what crossed each way ("the
 * wire") and can alter a byte at a chosen offset, leave bytes out or send
 * them again on the way. The handshake is the cluster key's (auth.h):
 * Challenge, Hello, Welcome, each side hashing them from its first frame
 * (or C from its second, to make the transcripts differ), and each seals
 * with the cipher the Hello picked, S after its Welcome, C on it.
 *
 * The owners record what their conns hand them (struct sp_event): pings,
 * the Error that carries SP_MARKER, data frames whole or landed, with
 * whether their bytes are the ones sent (a pattern of the frame's number
 * after a 40-byte prefix that starts with it).
 */
#ifndef PREDUCE_TESTS_SEAL_FIXTURE_H
#define PREDUCE_TESTS_SEAL_FIXTURE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/base/auth.h"
#include "daemon/base/conn.h"

#define SP_PREFIX    40 /* data_prefix: the TCP transport's chunk header */
#define SP_MAX_FRAME (8u << 20)
#define SP_MAXEV     64
#define SP_MARKER    "clear text that must not cross the wire: 0123456789"
#define SP_NCIPHERS  2

/* The relay's two directions. */
enum { SP_S_TO_C, SP_C_TO_S };

/* What a conn handed its owner. */
struct sp_event {
    char kind;    /* 'M' ping, 'E' error, 'D' whole data, 'L' landed, 'X' cut */
    uint32_t k;   /* ping nonce, or data frame number */
    size_t len;   /* data: payload bytes after the prefix */
    int status;   /* landing: on_data_end's (1 while open) */
    int ok;       /* the bytes were the ones sent */
    int in_place; /* landing: answered 2 */
    int untouched; /* landing that failed: not a byte written to dst */
};

struct sp;

/* One conn and what its owner was handed, in order. */
struct sp_side {
    struct sp *t;
    struct pr_conn *c; /* NULL once closed */
    char role;
    uint8_t s_nonce[PR_AUTH_NONCE_LEN], c_nonce[PR_AUTH_NONCE_LEN];
    uint32_t cipher;
    int up;         /* the handshake is done (sealed, when keyed) */
    int refuse_odd; /* on_data_begin says 0 to frames of odd numbers */
    int in_place;   /* ... and 2 (open it in place) to the others */
    int closes, close_status;
    struct sp_event ev[SP_MAXEV];
    size_t nev;
    int begins, ends;
};

/*
 * One direction of the relay: what it read from one end (offsets are
 * into this stream), and what it does to it on the way.
 */
struct sp_wire {
    uint8_t *b;
    size_t len, cap;
    size_t flip_at;        /* the byte to alter, SIZE_MAX: none */
    size_t drop_a, drop_b; /* bytes [a, b) go nowhere */
    size_t copy_a, copy_b; /* bytes [a, b) go again ... */
    size_t copy_after;     /* ... once the byte before this offset went */
};

/* Both sides, the relay between them, the loop that runs it all. */
struct sp {
    uv_loop_t loop;
    uv_timer_t limit;
    int timed_out;
    struct pr_auth_key key;
    int keyed;           /* 0: no key, nothing sealed */
    int late_transcript; /* C hashes from the frame after the Challenge */
    struct sp_side s, c;
    uv_pipe_t relay[2]; /* [SP_S_TO_C] reads S's peer end, [SP_C_TO_S] C's */
    int relay_open;
    struct sp_wire wire[2];
    uint8_t rbuf[2][65536];
    size_t writes_out;
    struct sp_side *want_side; /* sp_run_events: whose, how many */
    size_t want_events;
};
/* Owners' ops: data frames whole (on_data), or landed in place too. */
extern const struct pr_conn_ops sp_whole_ops, sp_land_ops;

/* Byte i of data frame k's payload: not periodic in 256 or 4096. */
uint8_t sp_pat(uint32_t k, size_t i);
/* Loop index i's cipher (ChaCha20, AES), or 0 when this machine lacks it. */
uint32_t sp_cipher_of(int i);

/*
 * Both sides on their socket pairs, the relay between them, the key
 * sealing with `cipher` alone (0: no key at all, nothing sealed); the
 * handshake begins. late_transcript: C hashes from the frame after the
 * Challenge.
 */
void sp_init(struct sp *t, uint32_t cipher, const struct pr_conn_ops *s_ops,
             const struct pr_conn_ops *c_ops, int late_transcript);
/* Runs the loop until pred holds; fails on the time limit (10 s). */
void sp_run_until(struct sp *t, int (*pred)(struct sp *t));
int sp_both_up(struct sp *t);
int sp_c_closed(struct sp *t);
int sp_s_closed(struct sp *t);
/* Runs until d has n events, every landing ended. */
void sp_run_events(struct sp *t, struct sp_side *d, size_t n);
/*
 * Closes what is open, runs the loop empty and checks: each side closed
 * once, no write left, uv_loop_close() == 0, every landing ended once.
 */
void sp_fini(struct sp *t);

void sp_send_ping(struct sp_side *d, uint32_t nonce);
/* The bytes of a sealed Ping with this nonce on the wire. */
size_t sp_ping_wire_len(uint32_t nonce);
/* An Error whose reason is SP_MARKER (code 7). */
void sp_send_marker(struct sp_side *d);
/* Data frame k with len payload bytes after its 40-byte prefix. */
void sp_send_data(struct sp_side *d, uint32_t k, size_t len);
/* A sealed data frame's bytes on the wire. */
size_t sp_data_wire_len(size_t len);
/* d's event i is of this kind and number, and its bytes were right. */
/*
 * A sealed-conn suite's main(): libsodium started, warnings (a frame that
 * fails to open logs one) kept out of the output, SIGPIPE ignored, then
 * the suite run (check_run's exit status).
 */
struct Suite;
int sp_main(struct Suite *s);
void sp_check_event(const struct sp_side *d, size_t i, char kind, uint32_t k,
                    size_t len);

#endif
