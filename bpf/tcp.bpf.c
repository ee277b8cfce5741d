// SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause
/*
 * TCP collector: per-connection window, congestion and retransmit state of
 * target processes, and zero-window episodes (the peer advertising a zero
 * receive window: backpressure from a slow reader).
 *
 * Sockets are followed by socket cookie in `socks`. Userspace adds the
 * sockets of a target it finds through socket diag (inode -> /proc/<pid>/fd),
 * and the target's listening ports in `listen_ports`: connections accepted
 * on them are followed from the moment they are established, before
 * userspace polls.
 *
 * tcp_probe runs for every segment received in ESTABLISHED state: it
 * snapshots cwnd, ssthresh, the windows, srtt and packets in flight, and
 * reads the window the peer advertises in this very segment to start and
 * end zero-window episodes. tcp_retransmit_skb counts retransmits and
 * inet_sock_set_state reports open, state changes and close.
 *
 * Optional programs (each is left out on a kernel without its tracepoint):
 * tcp_cong_state_set follows the congestion state machine (Open, Disorder,
 * CWR, Recovery, Loss) and reports loss-recovery episodes (from entering
 * Recovery or Loss until back below Recovery); tcp_rcv_space_adjust
 * records the receive-buffer autotuning (rcvq_space.space, sk_rcvbuf) as
 * the application reads; kfree_skb with reason PROTO_MEM counts segments a
 * TCP socket dropped because its receive queue was full (TCPRcvQDrop and
 * TCPOFODrop: the application was not reading fast enough), and
 * sock_rcvqueue_full the same for the generic sock_queue_rcv_skb path
 * (which TCP itself does not take). All filter on followed sockets first.
 *
 * For the critical path of a token gap (optional, left out of the daemon):
 * sock_send_length records each send of a followed server socket (time,
 * thread, ports, bytes); sends within send_fold_ns of the connection's last
 * send record are folded into sums carried by its next record. sk_data_ready
 * records each arrival of data at a socket of the load generator
 * (TARGET_CLIENT: sockets that client_tgid connects, followed from SYN_SENT
 * in its own context): ports, bytes arrived since the previous arrival and
 * bytes queued unread. Client sockets send no other records.
 *
 * Aggregates per target slot (per-CPU array; slot 0 is host-wide for
 * retransmits and srtt): retransmits, zero-window time and episodes, and a
 * log2 srtt histogram sampled per received segment. Discrete events of
 * streamed targets go through the event pipeline (pipeline.h), which counts
 * what it could not take.
 */
#include "pipeline.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define TCP_ESTABLISHED_STATE 1
#define TCP_CLOSE_STATE 7
#define TCP_SYN_SENT_STATE 2

enum ev_kind {
	EV_OPEN = 0,         /* became ESTABLISHED */
	EV_CLOSE = 1,        /* went to CLOSE; counters are final */
	EV_STATE = 2,        /* another state change */
	EV_RETRANSMIT = 3,   /* one segment retransmitted */
	EV_ZW_START = 4,     /* the peer's window went to zero */
	EV_ZW_END = 5,       /* the peer's window opened; duration_ns is the episode */
	EV_CWND = 6,         /* snd_cwnd moved by a quarter or more since the last report */
	EV_LOSS_START = 7,   /* entered Recovery or Loss from Open, Disorder or CWR */
	EV_LOSS_END = 8,     /* back below Recovery; duration_ns is the episode */
	EV_SEND = 9,         /* a send of a followed server socket */
	EV_ARRIVAL = 10,     /* data arrived at a client socket */
	EV_SEND_FULL = 11,   /* a send of a followed server socket found its
			      * buffer full (EAGAIN): the first since the
			      * last send that went through */
	EV_REQUEST = 12,     /* live_requests: the data that arrived at a
			      * followed server socket since its last send
			      * (a request), sent just before the send that
			      * follows it: ts the last arrival, duration_ns
			      * back to the first, bytes, fold_n arrivals */
	EV_RELEASE = 13,     /* live_requests: the peer acknowledged more of
			      * what the server wrote into its full window
			      * (queued >= snd_wnd at the send): the reader
			      * took it up to seq. duration_ns back to the
			      * first such send not yet all acknowledged */
};

struct event {
	__u64 ts;          /* CLOCK_MONOTONIC ns */
	__u64 cookie;      /* socket cookie */
	__u64 duration_ns; /* EV_ZW_END, EV_CLOSE of an open episode */
	__u64 zw_total_ns; /* zero-window time of the connection so far */
	__u8 saddr[16];    /* local address (IPv4 in the first 4 bytes) */
	__u8 daddr[16];    /* remote address */
	__u16 sport;       /* local port, host order */
	__u16 dport;       /* remote port, host order */
	__u16 family;
	__u8 kind;      /* enum ev_kind */
	__u8 state;     /* new TCP state (EV_OPEN, EV_CLOSE, EV_STATE) */
	__u8 old_state; /* previous TCP state */
	__u8 ca_state;     /* EV_LOSS_*: congestion state entered (enum tcp_ca_state) */
	__u8 old_ca_state; /* EV_LOSS_*: congestion state left */
	__u8 pad;
	__u32 target;   /* target slot */
	__u32 snd_cwnd;
	__u32 prev_cwnd; /* EV_CWND: the cwnd last reported */
	__u32 ssthresh;
	__u32 snd_wnd;   /* peer's receive window, bytes */
	__u32 rcv_wnd;   /* our receive window, bytes */
	__u32 srtt_us;
	__u32 in_flight; /* packets */
	__u32 retrans;   /* retransmits of the connection so far */
	__u32 snd_wnd_min;
	__u32 rcvq_full;  /* segments dropped for a full receive queue so far */
	__u32 rcv_space;  /* receive autotuning: rcvq_space.space, bytes */
	__u32 rcvbuf;     /* sk_rcvbuf at the last autotuning, bytes */
	__u32 recoveries; /* entries into Recovery so far */
	__u32 losses;     /* entries into Loss so far */
	__u64 loss_total_ns; /* time in Recovery/Loss so far (closed episodes) */
	/* EV_SEND: this send's bytes; EV_ARRIVAL: the bytes this arrival
	 * queued (rcv_nxt moved by). */
	__u64 bytes;
	/* Sends (arrivals) folded since the previous EV_SEND (EV_ARRIVAL)
	 * record of the connection, each within send_fold_ns of it: they
	 * belong to that record's burst, which ended at fold_last_ts. */
	__u64 fold_bytes;
	__u64 fold_last_ts;
	__u32 fold_n;
	__u32 tid;    /* EV_SEND: the sending thread */
	__u32 queued; /* EV_ARRIVAL: bytes received and not yet read; EV_SEND
		       * (live_requests): bytes sent before it, unacknowledged */
	__u32 seq;    /* live_requests: EV_SEND write_seq after it; EV_RELEASE
		       * the acknowledged sequence */
};

/* Force BTF emission for bpf2go -type. */
const struct event *unused_event __attribute__((unused));

/* A followed socket: its target and running state. */
struct sock_info {
	__u64 zw_start;    /* start of the open zero-window episode, 0 if none */
	__u64 zw_total_ns; /* closed episodes */
	__u64 zw_episodes;
	__u32 idx;   /* target slot */
	__u32 flags; /* TARGET_* */
	__u32 retrans;
	__u32 snd_wnd_min; /* userspace starts it at ~0 */
	__u32 last_cwnd;   /* cwnd last reported in an event */
	__u32 snd_cwnd;
	__u32 ssthresh;
	__u32 snd_wnd;
	__u32 rcv_wnd;
	__u32 srtt_us;
	__u32 in_flight;
	__u32 rcvq_full;  /* segments dropped for a full receive queue */
	__u64 loss_start;    /* start of the open Recovery/Loss episode, 0 if none */
	__u64 loss_total_ns; /* closed Recovery/Loss episodes */
	__u32 rcv_space;  /* rcvq_space.space at the last autotuning */
	__u32 rcvbuf;     /* sk_rcvbuf at the last autotuning */
	__u32 recoveries; /* entries into Recovery */
	__u32 losses;     /* entries into Loss */
	__u64 data_ts;    /* last EV_SEND or EV_ARRIVAL record */
	__u64 fold_bytes; /* folded since it */
	__u64 fold_last_ts;
	__u32 fold_n;
	__u32 rcv_nxt;    /* client sockets: rcv_nxt at the last arrival (0: none) */
	__u32 fin;        /* client sockets: the peer's FIN was counted out */
	__u32 rx_n;       /* server sockets (live_requests): arrivals since the last send */
	__u64 full_ts;    /* the first EAGAIN send since the last one through, 0: none */
	__u64 rx_first;   /* server sockets: the first and last of those arrivals */
	__u64 rx_last;
	__u64 rx_bytes;   /* and their bytes */
	__u64 held_ts;    /* server sockets (live_requests): the first send into a
			   * full peer window not yet all acknowledged, 0: none */
	__u64 rel_ts;     /* the last EV_RELEASE */
	__u32 held_seq;   /* write_seq after the last such send */
	__u32 rel_seq;    /* the last sequence an EV_RELEASE reported */
};

struct listen_key {
	__u32 netns; /* network namespace inode */
	__u16 port;  /* host order */
	__u16 pad;
};

struct tstats {
	__u64 srtt[HIST_SLOTS];
	__u64 srtt_count;
	__u64 srtt_sum_ns;
	__u64 retrans;
	__u64 zw_ns;
	__u64 zw_episodes;
	__u64 rcvq_full;     /* segments dropped for a full receive queue */
	__u64 loss_episodes; /* entries into Recovery/Loss from below */
	__u64 loss_ns;       /* closed Recovery/Loss episodes (followed sockets) */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct sock_info);
} socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct listen_key);
	__type(value, struct target);
} listen_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_TARGETS);
	__type(key, __u32);
	__type(value, struct tstats);
} stats SEC(".maps");

/* Set by userspace before load: aggregate retransmits and srtt of every
 * socket under slot 0 (the daemon) or only followed sockets (a session). */
volatile const bool host_wide = true;

/* Set by userspace before load: sends and arrivals within this of the
 * connection's last such record are folded into it. */
volatile const __u64 send_fold_ns = 50000;

/* Set by userspace at run time: the load generator, whose connections are
 * followed from SYN_SENT as TARGET_CLIENT sockets of slot client_idx. */
volatile __u32 client_tgid = 0;
volatile __u32 client_idx = 0;

/* Set by userspace before load: follow the data arriving at streamed
 * server sockets (the requests of live traffic, `attach` and the daemon
 * without a load generator). sk_data_ready sums them in the socket's
 * entry, no record; the server's next send hands them over in one
 * EV_REQUEST record. */
volatile const bool live_requests = false;

static __always_inline struct tstats *tstats_of(__u32 idx)
{
	if (idx >= MAX_TARGETS)
		return 0;
	return bpf_map_lookup_elem(&stats, &idx);
}

/* fill_conn fills a record's connection: family, addresses and ports (the
 * local port in host order, the peer's from network order). */
static __always_inline void fill_conn(struct event *e, const struct sock *sk)
{
	__u16 family = sk->__sk_common.skc_family;
	e->family = family;
	if (family == AF_INET6) {
		__builtin_memcpy(e->saddr, &sk->__sk_common.skc_v6_rcv_saddr, 16);
		__builtin_memcpy(e->daddr, &sk->__sk_common.skc_v6_daddr, 16);
	} else {
		__u32 sa = sk->__sk_common.skc_rcv_saddr;
		__u32 da = sk->__sk_common.skc_daddr;
		__builtin_memcpy(e->saddr, &sa, 4);
		__builtin_memcpy(e->daddr, &da, 4);
	}
	e->sport = sk->__sk_common.skc_num;
	e->dport = __builtin_bswap16(sk->__sk_common.skc_dport);
}

static __always_inline void emit_ca(struct sock *sk, struct sock_info *si,
				    __u64 cookie, __u64 now, __u8 kind,
				    __u8 state, __u8 old_state, __u64 duration,
				    __u8 ca_state, __u8 old_ca_state)
{
	if (!(si->flags & TARGET_STREAM) || (si->flags & TARGET_CLIENT))
		return;
	struct event *e = pipe_reserve(struct event);
	if (!e)
		return;
	__builtin_memset(e, 0, sizeof(*e));
	e->ts = now;
	e->cookie = cookie;
	e->duration_ns = duration;
	e->zw_total_ns = si->zw_total_ns;
	fill_conn(e, sk);
	e->kind = kind;
	e->state = state;
	e->old_state = old_state;
	e->ca_state = ca_state;
	e->old_ca_state = old_ca_state;
	e->target = si->idx;
	e->snd_cwnd = si->snd_cwnd;
	e->prev_cwnd = si->last_cwnd;
	e->ssthresh = si->ssthresh;
	e->snd_wnd = si->snd_wnd;
	e->rcv_wnd = si->rcv_wnd;
	e->srtt_us = si->srtt_us;
	e->in_flight = si->in_flight;
	e->retrans = si->retrans;
	e->snd_wnd_min = si->snd_wnd_min;
	e->rcvq_full = si->rcvq_full;
	e->rcv_space = si->rcv_space;
	e->rcvbuf = si->rcvbuf;
	e->recoveries = si->recoveries;
	e->losses = si->losses;
	e->loss_total_ns = si->loss_total_ns;
	pipe_submit(e, sizeof(*e));
}

static __always_inline void emit(struct sock *sk, struct sock_info *si,
				 __u64 cookie, __u64 now, __u8 kind,
				 __u8 state, __u8 old_state, __u64 duration)
{
	emit_ca(sk, si, cookie, now, kind, state, old_state, duration, 0, 0);
}

/* end_loss closes the open Recovery/Loss episode of si at now; it returns
 * the episode's length. */
static __always_inline __u64 end_loss(struct sock_info *si, __u64 now)
{
	__u64 d = now > si->loss_start ? now - si->loss_start : 0;
	si->loss_total_ns += d;
	si->loss_start = 0;
	struct tstats *ts = tstats_of(si->idx);
	if (ts)
		ts->loss_ns += d;
	return d;
}

static __always_inline void snapshot(struct sock *sk, struct sock_info *si)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return;
	si->snd_cwnd = tp->snd_cwnd;
	si->ssthresh = tp->snd_ssthresh;
	si->snd_wnd = tp->snd_wnd;
	si->rcv_wnd = tp->rcv_wnd;
	si->srtt_us = tp->srtt_us >> 3;
	__u32 left = tp->sacked_out + tp->lost_out;
	__u32 out = tp->packets_out;
	si->in_flight = (out > left ? out - left : 0) + tp->retrans_out;
}

/* fill_data fills the parts of an EV_SEND/EV_ARRIVAL record that come from
 * the socket, and hands it the sums folded since the previous one. */
static __always_inline void fill_data(struct event *e, const struct sock *sk,
				      struct sock_info *si, __u64 cookie,
				      __u64 now, __u8 kind)
{
	__builtin_memset(e, 0, sizeof(*e));
	e->ts = now;
	e->cookie = cookie;
	fill_conn(e, sk);
	e->kind = kind;
	e->target = si->idx;
	e->fold_bytes = si->fold_bytes;
	e->fold_last_ts = si->fold_last_ts;
	e->fold_n = si->fold_n;
	si->data_ts = now;
	si->fold_bytes = 0;
	si->fold_last_ts = 0;
	si->fold_n = 0;
}

/* fold_data folds bytes into si when its last data record is recent. */
static __always_inline bool fold_data(struct sock_info *si, __u64 now, __u64 bytes)
{
	if (!si->data_ts || now - si->data_ts >= send_fold_ns)
		return false;
	si->fold_bytes += bytes;
	si->fold_last_ts = now;
	si->fold_n++;
	pipe_count(PIPE_FOLDED, 1);
	return true;
}

static __always_inline bool is_tcp(const struct sock *sk)
{
	__u16 family = sk->__sk_common.skc_family;
	return (family == AF_INET || family == AF_INET6) &&
	       sk->sk_protocol == IPPROTO_TCP;
}

/* flush_data sends the sums still folded into a closing socket's last
 * send (arrival) record: a record of 0 bytes carrying them. */
static __always_inline void flush_data(struct sock *sk, struct sock_info *si,
				       __u64 cookie, __u64 now)
{
	if (!(si->flags & TARGET_STREAM))
		return;
	/* With live_requests, a streamed server socket always sends it: the
	 * record of 0 bytes is the end of its streams. */
	if (!si->fold_n && !(live_requests && !(si->flags & TARGET_CLIENT)))
		return;
	struct event *e = pipe_reserve(struct event);
	if (!e)
		return;
	fill_data(e, sk, si, cookie, now,
		  (si->flags & TARGET_CLIENT) ? EV_ARRIVAL : EV_SEND);
	pipe_submit(e, sizeof(*e));
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(tcp_probe, struct sock *sk, struct sk_buff *skb)
{
	__u64 cookie = bpf_get_socket_cookie(sk);
	struct sock_info *si = bpf_map_lookup_elem(&socks, &cookie);
	/* The load generator's sockets take every chunk the server sends,
	 * half of a session's segments: they record arrivals only, and their
	 * windows and srtt are the server socket's to tell. */
	if (si ? (si->flags & TARGET_CLIENT) : !host_wide)
		return 0;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;
	if (!si) {
		/* host_wide: a socket nobody follows is in slot 0 only. */
		struct tstats *ts = tstats_of(0);
		if (ts) {
			__u64 srtt = (__u64)(tp->srtt_us >> 3) * 1000;
			__u32 s = hist_slot(srtt);
			if (s < HIST_SLOTS)
				ts->srtt[s]++;
			ts->srtt_count++;
			ts->srtt_sum_ns += srtt;
		}
		return 0;
	}
	__u64 now = bpf_ktime_get_ns();
	snapshot(sk, si);
	__u64 srtt = (__u64)si->srtt_us * 1000;
	__u32 s = hist_slot(srtt);
	__u32 idxs[2] = { 0, si->idx };
	for (int i = host_wide ? 0 : 1; i < 2; i++) {
		struct tstats *ts = tstats_of(idxs[i]);
		if (!ts)
			continue;
		if (s < HIST_SLOTS)
			ts->srtt[s]++;
		ts->srtt_count++;
		ts->srtt_sum_ns += srtt;
	}

	/* The window the peer advertises in this segment. */
	struct tcphdr th;
	unsigned char *head = skb->head;
	__u16 thoff = skb->transport_header;
	if (bpf_probe_read_kernel(&th, sizeof(th), head + thoff) == 0 && th.ack &&
	    !th.syn) {
		/* More of what was written into a full window acknowledged:
		 * the reader took it up to ack (at most one record per fold
		 * window; the one that acknowledges everything always). */
		__u32 ack = __builtin_bswap32(th.ack_seq);
		if (si->held_ts && (__s32)(ack - si->rel_seq) > 0) {
			bool all = (__s32)(ack - si->held_seq) >= 0;
			if (all || now - si->rel_ts >= send_fold_ns) {
				__u64 d = now > si->held_ts ? now - si->held_ts : 0;
				si->rel_seq = ack;
				si->rel_ts = now;
				if (all)
					si->held_ts = 0;
				struct event *r = pipe_reserve(struct event);
				if (r) {
					__builtin_memset(r, 0, sizeof(*r));
					fill_conn(r, sk);
					r->ts = now;
					r->cookie = cookie;
					r->kind = EV_RELEASE;
					r->target = si->idx;
					r->duration_ns = d;
					r->seq = ack;
					pipe_submit(r, sizeof(*r));
				}
			}
		}
		__u32 wscale = BPF_CORE_READ_BITFIELD_PROBED(tp, rx_opt.snd_wscale);
		__u32 wnd = (__u32)__builtin_bswap16(th.window) << (wscale & 15);
		if (wnd < si->snd_wnd_min)
			si->snd_wnd_min = wnd;
		if (wnd == 0 && !si->zw_start) {
			si->zw_start = now;
			si->zw_episodes++;
			struct tstats *ts = tstats_of(si->idx);
			if (ts)
				ts->zw_episodes++;
			emit(sk, si, cookie, now, EV_ZW_START, 0, 0, 0);
		} else if (wnd > 0 && si->zw_start) {
			__u64 d = now > si->zw_start ? now - si->zw_start : 0;
			si->zw_total_ns += d;
			si->zw_start = 0;
			struct tstats *ts = tstats_of(si->idx);
			if (ts)
				ts->zw_ns += d;
			emit(sk, si, cookie, now, EV_ZW_END, 0, 0, d);
		}
	}

	__u32 last = si->last_cwnd, cwnd = si->snd_cwnd;
	__u32 diff = cwnd > last ? cwnd - last : last - cwnd;
	if (last == 0 || diff * 4 >= last) {
		emit(sk, si, cookie, now, EV_CWND, 0, 0, 0);
		si->last_cwnd = cwnd;
	}
	return 0;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(tcp_retransmit_skb, struct sock *sk, struct sk_buff *skb)
{
	__u64 cookie = bpf_get_socket_cookie(sk);
	struct sock_info *si = bpf_map_lookup_elem(&socks, &cookie);
	if (host_wide) {
		struct tstats *ts = tstats_of(0);
		if (ts)
			ts->retrans++;
	}
	if (!si)
		return 0;
	si->retrans++;
	struct tstats *ts = tstats_of(si->idx);
	if (ts)
		ts->retrans++;
	snapshot(sk, si);
	emit(sk, si, cookie, bpf_ktime_get_ns(), EV_RETRANSMIT, 0, 0, 0);
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(inet_sock_set_state, struct sock *sk, int oldstate, int newstate)
{
	if (sk->sk_protocol != IPPROTO_TCP)
		return 0;
	__u64 cookie = bpf_get_socket_cookie(sk);
	__u64 now = bpf_ktime_get_ns();
	struct sock_info *si = bpf_map_lookup_elem(&socks, &cookie);
	if (!si && newstate == TCP_SYN_SENT_STATE && client_tgid &&
	    (bpf_get_current_pid_tgid() >> 32) == client_tgid) {
		/* connect() of the load generator, in its own context. */
		struct sock_info n = {
			.idx = client_idx,
			.flags = TARGET_STREAM | TARGET_CLIENT,
			.snd_wnd_min = 0xffffffff,
		};
		bpf_map_update_elem(&socks, &cookie, &n, BPF_NOEXIST);
		return 0;
	}
	if (!si && newstate == TCP_ESTABLISHED_STATE) {
		/* A connection accepted on a followed listening port. */
		struct listen_key lk = {
			.netns = sk->__sk_common.skc_net.net->ns.inum,
			.port = sk->__sk_common.skc_num,
		};
		struct target *t = bpf_map_lookup_elem(&listen_ports, &lk);
		if (!t)
			return 0;
		struct sock_info n = {
			.idx = t->idx,
			.flags = t->flags,
			.snd_wnd_min = 0xffffffff,
		};
		bpf_map_update_elem(&socks, &cookie, &n, BPF_NOEXIST);
		si = bpf_map_lookup_elem(&socks, &cookie);
	}
	if (!si)
		return 0;
	if (newstate == TCP_ESTABLISHED_STATE) {
		snapshot(sk, si);
		emit(sk, si, cookie, now, EV_OPEN, newstate, oldstate, 0);
		return 0;
	}
	if (newstate != TCP_CLOSE_STATE) {
		emit(sk, si, cookie, now, EV_STATE, newstate, oldstate, 0);
		return 0;
	}
	flush_data(sk, si, cookie, now);
	if (si->loss_start) {
		/* Closed during loss recovery: the episode ends with it. */
		__u8 ca = TCP_CA_Loss;
		struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
		if (tp)
			ca = BPF_CORE_READ_BITFIELD_PROBED(&tp->inet_conn, icsk_ca_state);
		__u64 ld = end_loss(si, now);
		emit_ca(sk, si, cookie, now, EV_LOSS_END, newstate, oldstate, ld,
			TCP_CA_Open, ca);
	}
	__u64 d = 0;
	if (si->zw_start) {
		d = now > si->zw_start ? now - si->zw_start : 0;
		si->zw_total_ns += d;
		si->zw_start = 0;
		struct tstats *ts = tstats_of(si->idx);
		if (ts)
			ts->zw_ns += d;
	}
	emit(sk, si, cookie, now, EV_CLOSE, newstate, oldstate, d);
	bpf_map_delete_elem(&socks, &cookie);
	return 0;
}

/* rcvq_full_of counts one segment dropped for a full receive queue of sk. */
static __always_inline void rcvq_full_of(struct sock *sk)
{
	__u64 cookie = bpf_get_socket_cookie(sk);
	struct sock_info *si = bpf_map_lookup_elem(&socks, &cookie);
	if (host_wide) {
		struct tstats *ts = tstats_of(0);
		if (ts)
			ts->rcvq_full++;
	}
	if (!si)
		return;
	si->rcvq_full++;
	struct tstats *ts = tstats_of(si->idx);
	if (ts)
		ts->rcvq_full++;
}

/* TCP drops a segment with PROTO_MEM when the receive queue (or the
 * out-of-order queue) cannot take it: TCPRcvQDrop and TCPOFODrop. Every
 * drop of the host runs this; it returns at the first comparison for all
 * other reasons. */
SEC("tp_btf/kfree_skb")
int BPF_PROG(kfree_skb, struct sk_buff *skb, void *location,
	     enum skb_drop_reason reason, struct sock *rx_sk)
{
	if (reason != bpf_core_enum_value(enum skb_drop_reason,
					  SKB_DROP_REASON_PROTO_MEM))
		return 0;
	if (!rx_sk || !bpf_skc_to_tcp_sock(rx_sk))
		return 0;
	rcvq_full_of(rx_sk);
	return 0;
}

/* The generic receive-queue overflow (sock_queue_rcv_skb); TCP does not
 * queue through it, so this counts only if a kernel starts to. */
SEC("tp_btf/sock_rcvqueue_full")
int BPF_PROG(sock_rcvqueue_full, struct sock *sk, struct sk_buff *skb)
{
	if (!bpf_skc_to_tcp_sock(sk))
		return 0;
	rcvq_full_of(sk);
	return 0;
}

/* Runs as the application reads (tcp_recvmsg), before the adjustment:
 * the figures are those of the last adjustment. */
SEC("tp_btf/tcp_rcv_space_adjust")
int BPF_PROG(tcp_rcv_space_adjust, struct sock *sk)
{
	__u64 cookie = bpf_get_socket_cookie(sk);
	struct sock_info *si = bpf_map_lookup_elem(&socks, &cookie);
	/* The load generator reads a chunk at a time: not its sockets. */
	if (!si || (si->flags & TARGET_CLIENT))
		return 0;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;
	si->rcv_space = tp->rcvq_space.space;
	si->rcvbuf = sk->sk_rcvbuf;
	return 0;
}

/* Runs before icsk_ca_state takes the new state: the socket still holds
 * the old one. */
SEC("tp_btf/tcp_cong_state_set")
int BPF_PROG(tcp_cong_state_set, struct sock *sk, __u8 ca_state)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;
	__u8 old = BPF_CORE_READ_BITFIELD_PROBED(&tp->inet_conn, icsk_ca_state);
	if (old == ca_state)
		return 0;
	bool entering = ca_state >= TCP_CA_Recovery && old < TCP_CA_Recovery;
	__u64 cookie = bpf_get_socket_cookie(sk);
	struct sock_info *si = bpf_map_lookup_elem(&socks, &cookie);
	if (host_wide && entering) {
		struct tstats *ts = tstats_of(0);
		if (ts)
			ts->loss_episodes++;
	}
	if (!si)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	if (ca_state == TCP_CA_Recovery)
		si->recoveries++;
	else if (ca_state == TCP_CA_Loss)
		si->losses++;
	if (ca_state >= TCP_CA_Recovery && !si->loss_start) {
		si->loss_start = now;
		struct tstats *ts = tstats_of(si->idx);
		if (ts)
			ts->loss_episodes++;
		snapshot(sk, si);
		emit_ca(sk, si, cookie, now, EV_LOSS_START, 0, 0, 0, ca_state, old);
	} else if (ca_state < TCP_CA_Recovery && si->loss_start) {
		__u64 d = end_loss(si, now);
		snapshot(sk, si);
		emit_ca(sk, si, cookie, now, EV_LOSS_END, 0, 0, d, ca_state, old);
	}
	return 0;
}

/* Every sendmsg of the host (sock_sendmsg) runs this, in the sender's
 * context: after two plain loads and a lookup it returns unless the
 * socket is a streamed server socket. */
static __always_inline int on_send(struct sock *sk, int ret);

SEC("tp_btf/sock_send_length")
int BPF_PROG(sock_send_length, struct sock *sk, int ret, int flags)
{
	return on_send(sk, ret);
}

/* Kernels without sock_send_length (6.1 has none; 6.12 has it): the return of
 * tcp_sendmsg, which every send on a TCP socket reaches through the
 * protocol's sendmsg pointer (so never inlined into its callers, as
 * sock_sendmsg is into sock_write_iter and __sys_sendto). Loaded only
 * there. */
SEC("fexit/tcp_sendmsg")
int BPF_PROG(tcp_sendmsg_exit, struct sock *sk, struct msghdr *msg, size_t size, int ret)
{
	return on_send(sk, ret);
}

static __always_inline int on_send(struct sock *sk, int ret)
{
	if ((ret <= 0 && ret != -11 /* EAGAIN */) || !is_tcp(sk))
		return 0;
	__u64 cookie = bpf_get_socket_cookie(sk);
	struct sock_info *si = bpf_map_lookup_elem(&socks, &cookie);
	if (!si || !(si->flags & TARGET_STREAM) || (si->flags & TARGET_CLIENT))
		return 0;
	__u64 now = bpf_ktime_get_ns();
	if (ret < 0) {
		/* A non-blocking server's send found the buffer full: the
		 * chunk waits for the connection from now until a send goes
		 * through (a blocking one sleeps in sendmsg instead). */
		if (si->full_ts)
			return 0;
		si->full_ts = now;
		struct event *f = pipe_reserve(struct event);
		if (!f)
			return 0;
		fill_data(f, sk, si, cookie, now, EV_SEND_FULL);
		f->tid = (__u32)bpf_get_current_pid_tgid();
		pipe_submit(f, sizeof(*f));
		return 0;
	}
	bool request = false;
	if (si->rx_n) {
		/* The request the data since the last send made: its record
		 * goes first, and the response's first send is never folded
		 * into the previous response's burst. */
		struct event *q = pipe_reserve(struct event);
		if (q) {
			__builtin_memset(q, 0, sizeof(*q));
			q->ts = si->rx_last;
			q->cookie = cookie;
			fill_conn(q, sk);
			q->kind = EV_REQUEST;
			q->target = si->idx;
			q->duration_ns = si->rx_last - si->rx_first;
			q->bytes = si->rx_bytes;
			q->fold_n = si->rx_n;
			pipe_submit(q, sizeof(*q));
		}
		si->rx_n = 0;
		si->rx_bytes = 0;
		request = true;
	}
	/* The first send through after a full buffer is never folded: its
	 * record ends the wait. */
	if (si->full_ts)
		si->full_ts = 0;
	else if (!request && fold_data(si, now, ret))
		return 0;
	struct event *e = pipe_reserve(struct event);
	if (!e)
		return 0;
	fill_data(e, sk, si, cookie, now, EV_SEND);
	e->bytes = ret;
	e->tid = (__u32)bpf_get_current_pid_tgid();
	if (live_requests) {
		/* Whether this chunk can leave now: queued is what was sent
		 * before it and not acknowledged, snd_wnd what the peer can
		 * take. queued >= snd_wnd: the chunk waits in the send queue
		 * for the reader (a slow client's closed window), however fast
		 * the server wrote it. */
		struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
		if (tp) {
			__u32 wseq = tp->write_seq;
			/* Over loopback or a veth the peer may have acknowledged
			 * part of this chunk already (the receive runs inside
			 * the send): nothing before it is then unacknowledged. */
			__s32 q = (__s32)(wseq - tp->snd_una - (__u32)ret);
			e->queued = q > 0 ? q : 0;
			e->snd_wnd = tp->snd_wnd;
			e->seq = wseq;
			/* Held until the peer acknowledges it (tcp_probe):
			 * EV_RELEASE. */
			if (e->queued && e->queued >= e->snd_wnd) {
				if (!si->held_ts) {
					si->held_ts = now;
					si->rel_seq = tp->snd_una;
				}
				si->held_seq = wseq;
			}
		}
	}
	pipe_submit(e, sizeof(*e));
	return 0;
}

/* live_requests: data queued on a streamed server socket, summed into its
 * entry until the server's next send (sock_send_length) hands it over. */
static __always_inline int server_arrival(struct sock_info *si, struct tcp_sock *tp)
{
	__u32 nxt = tp->rcv_nxt;
	/* The first arrival seen: what is queued unread. */
	__u32 bytes = si->rcv_nxt ? nxt - si->rcv_nxt : nxt - tp->copied_seq;
	si->rcv_nxt = nxt;
	if (!bytes)
		return 0; /* a wakeup without new data, or the FIN alone */
	__u64 now = bpf_ktime_get_ns();
	if (!si->rx_n)
		si->rx_first = now;
	si->rx_last = now;
	si->rx_bytes += bytes;
	si->rx_n++;
	return 0;
}

/* Data queued on a socket (tcp_data_ready, usually in softirq): arrivals
 * at the load generator's own sockets, and with live_requests the
 * requests at the followed server's. */
static __always_inline int on_data_ready(const struct sock *sk);

SEC("tp_btf/sk_data_ready")
int BPF_PROG(sk_data_ready, const struct sock *sk)
{
	return on_data_ready(sk);
}

/* Kernels without sk_data_ready (6.1 has none; 6.12 has it): the entry of
 * sock_def_readable, the data-ready callback of TCP and unix sockets
 * (tcp_data_ready calls it). Loaded only there. */
SEC("fentry/sock_def_readable")
int BPF_PROG(sock_def_readable_entry, struct sock *sk)
{
	return on_data_ready(sk);
}

static __always_inline int on_data_ready(const struct sock *sk)
{
	if ((!client_tgid && !live_requests) || !is_tcp(sk))
		return 0;
	__u64 cookie = bpf_get_socket_cookie((void *)sk);
	struct sock_info *si = bpf_map_lookup_elem(&socks, &cookie);
	if (!si || !(si->flags & (TARGET_CLIENT | TARGET_STREAM)))
		return 0;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock((void *)sk);
	if (!tp)
		return 0;
	if (!(si->flags & TARGET_CLIENT))
		return live_requests ? server_arrival(si, tp) : 0;
	__u32 nxt = tp->rcv_nxt, copied = tp->copied_seq;
	/* The first arrival seen: what is queued unread. */
	__u32 bytes = si->rcv_nxt ? nxt - si->rcv_nxt : nxt - copied;
	__u32 queued = nxt - copied;
	si->rcv_nxt = nxt;
	/* The peer's FIN takes a sequence number and no byte. */
	if (sk->sk_shutdown & 1 /* RCV_SHUTDOWN */) {
		if (!si->fin && bytes)
			bytes--;
		si->fin = 1;
		if (queued)
			queued--;
	}
	/* Nothing arrived: the FIN alone, in a segment of its own (sent more
	 * than send_fold_ns after the last data), or a wakeup without new
	 * data. No record: an arrival is bytes for the reader. */
	if (!bytes)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	if (fold_data(si, now, bytes))
		return 0;
	struct event *e = pipe_reserve(struct event);
	if (!e)
		return 0;
	fill_data(e, sk, si, cookie, now, EV_ARRIVAL);
	e->bytes = bytes;
	e->queued = queued;
	pipe_submit(e, sizeof(*e));
	return 0;
}
