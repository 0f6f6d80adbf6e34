/*
 * sluice stream model: one streaming request over two decode workers, with
 * preemption, heartbeat-declared death and migration. Checked with spin by
 * spec/spin_test.go (TestSpinModels, make spec).
 *
 * What the code does, and where (internal/engine/disagg.go unless named):
 *   - Every attempt of a request is its own handoff (a new id; run:
 *     cur.setPair(newID(), ...) / cur.set(newID())) with its own token
 *     stream; the loop reads only the current attempt's stream and closes
 *     it (ts.Close) before the next, so an item of an earlier attempt never
 *     reaches the client.
 *   - A resume, after a preemption or a migration, is a new handoff of the
 *     prompt plus every token already sent, with the sampler at the same
 *     offset (drive: SampleOffset = len(gen); StreamParams.Generated), so
 *     batch-invariant kernels and the seeded sampler draw exactly the
 *     tokens the unfailed run would have.
 *   - A preempted request is paired afresh (Pair(r, nil)); the cluster
 *     picks among workers it believes up (router/node/cluster.go pick,
 *     cluster.Up). A decode worker whose stream failed by transport is
 *     marked down by the pair's Done (Cluster.markDown), which run calls
 *     only AFTER it chose the migration's new pair: at that moment the
 *     failed worker still looks up, and the avoid argument is the only
 *     thing keeping the migration off it. A stopped worker not yet
 *     declared dead looks up too.
 *   - A worker that is stopped (SIGSTOP, a stuck host) or killed sends
 *     nothing; the heartbeat (handoff/tcp/heartbeat.go) declares it dead
 *     after --peer-timeout of silence and the stream fails with
 *     ErrTransport. A live worker, however slow, pings and is never
 *     declared dead. A stopped worker can be continued (SIGCONT) after it
 *     was declared dead and go on sending for its old handoff.
 *   - The failure before any token reached the client is retried on
 *     another pair that avoids every pair that failed the request
 *     (nextPair), at most MaxRetries times (MAXR here: with two workers
 *     and one fault, one retry is all the model can use); after the first
 *     token it migrates (migratable): paired again AVOIDING the failed
 *     decode worker (Pair(r, []*Pair{cur.pair()}): the avoid argument, not
 *     the lagging health view), at most MaxMigrations times; then, or with
 *     no pair, the request ends with an error.
 *
 * Tokens are abstract: the i-th draw of the request's sampler is token i,
 * so the reference output is 0, 1, ..., N-1.
 *
 * Safety properties (assertions):
 *   exact   every token the client receives is the reference's token at
 *           that position: nothing lost, repeated or drawn at the wrong
 *           sampler offset, across preemptions and migrations;
 *   done    with at most one worker stopped or killed, the request ends
 *           with the whole reference output, never an error.
 *
 * Weakened variants, each of which must produce a counterexample:
 *   WRONG_OFFSET   a resume restarts the sampler at offset 0 (the prompt
 *                  is right, the random stream is not continued)  (exact)
 *   ACCEPT_STALE   items of an earlier attempt's stream are taken as the
 *                  current one's (a stopped worker continued after its
 *                  handoff was migrated away)                      (exact)
 *   NO_EXCLUDE     migration pairs again without avoiding the failed
 *                  worker (the health view still says up)           (done)
 *   MAXM=0         --max-migrations off: the stream ends with an
 *                  error when its worker fails after a token        (done)
 */

#ifndef N
#define N 3             /* the request's tokens */
#endif
#ifndef MAXM
#define MAXM 1          /* --max-migrations */
#endif
#ifndef MAXR
#define MAXR 1          /* DisaggConfig.MaxRetries (the budget before the first token) */
#endif
#ifndef NPRE
#define NPRE 1          /* preemptions the workers may make */
#endif

mtype = { TOK, PREEMPTED, DONE };

chan start[2] = [2] of { byte, byte, byte };	/* handoff, position, sampler offset */
chan out = [4] of { mtype, byte, byte };	/* kind, handoff, token */

bool stopped[2];        /* SIGSTOP or kill -9 (a killed worker is never continued) */
bool declared[2];       /* declared dead by the heartbeat */
byte faults = 0;        /* at most one worker is stopped, once */
byte preempts = 0;
byte delivered = 0;     /* tokens the client received */
bool finished = false;

proctype Worker(byte w) {
	byte h, pos, s;
end:	do
	:: start[w]?h,pos,s ->
		do
		:: !stopped[w] && pos < N -> out!TOK,h,s; pos++; s++
		:: !stopped[w] && pos == N -> out!DONE,h,0; break
		:: !stopped[w] && pos > 0 && pos < N && preempts < NPRE ->
			/* decode could not grow the sequence: released, "preempted" */
			preempts++; out!PREEMPTED,h,0; break
		:: atomic { !stopped[w] && faults == 0 -> faults++; stopped[w] = true }
		:: stopped[w] -> stopped[w] = false	/* SIGCONT */
		od
	od
}

/* the pair for a migration: the other worker (Pair with avoid) */
inline migrateTo() {
#ifdef NO_EXCLUDE
	if
	:: w = 0
	:: w = 1
	fi
#else
	w = 1 - w
#endif
}

/* the pair for a resume after preemption: any worker not marked down
 * (declared dead and marked by Done) */
inline pairAfresh() {
	if
	:: !declared[0] -> w = 0
	:: !declared[1] -> w = 1
	fi
}

inline resumeOffset() {
#ifdef WRONG_OFFSET
	soff = 0
#else
	soff = delivered
#endif
}

proctype Router() {
	byte w = 0, h = 1, migrations = 0, kv, soff;
	byte retries = 0;
	mtype kind;
	byte kh;

	start[w]!h,0,0;
	do
	:: out?kind,kh,kv ->
		if
#ifndef ACCEPT_STALE
		:: kh != h -> skip	/* an earlier attempt's closed stream */
#endif
		:: else ->
			if
			:: kind == TOK ->
				assert(kv == delivered);	/* exact */
				delivered++
			:: kind == DONE ->
				assert(delivered == N);	/* exact */
				finished = true; break
			:: kind == PREEMPTED ->
				h++; pairAfresh(); resumeOffset();
				start[w]!h,delivered,soff
			fi
		fi
	:: atomic { stopped[w] && !finished -> declared[w] = true };
		/* the heartbeat: the stream fails with ErrTransport */
		if
		:: delivered == 0 && retries < MAXR ->
			/* nothing reached the client: retried elsewhere */
			retries++; h++; w = 1 - w;
			start[w]!h,0,0
		:: delivered > 0 && migrations < MAXM ->
			migrations++; h++; migrateTo(); resumeOffset();
			start[w]!h,delivered,soff
		:: else -> break	/* the request ends with an error */
		fi
	od;
	assert(finished);	/* done */
	/* the router keeps reading (and dropping) what stragglers send */
end:	do
	:: out?kind,kh,kv
	od
}

init {
	atomic {
		run Worker(0);
		run Worker(1);
		run Router()
	}
}
