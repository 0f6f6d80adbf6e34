/*
 * sluice one-sided (shared memory) handoff model: the shared file's
 * per-page generation word, the quarantine lease, heartbeat-declared death
 * of the prefill peer, and preemption/resume as a new handoff. Checked with
 * spin by spec/spin_test.go (TestSpinModels, make spec).
 *
 * What the code does, and where:
 *   - Reserve gives a page a fresh generation and stores it in the page's
 *     generation word in the shared file (kv/pool.go reserveLocked:
 *     p.gens[pg].Store(p.gen)); every other state change closes the word
 *     (setStateLocked -> closeGen stores 0 BEFORE the tag changes): the
 *     write's notice (Reserved -> Filling), quarantine, release, scrub.
 *   - The writer (handoff/shm/shm.go, the land closure of post) loads the
 *     word immediately before each page copy and copies only when it
 *     equals the generation it was given (kv.SharedGens.Open); otherwise
 *     it counts GenFenced and ends the handoff locally. Between pages, or
 *     before a batch, a writer can stall for any time (SIGSTOP, a starved
 *     CPU): nothing bounds that stall.
 *   - An abort or failure before the commit, whoever asked (the router
 *     after a prefill call failed, decode's handoff timeout, decode's
 *     revocation of an over-share tenant's reservation for the KV quota:
 *     engine/decode.go revokeLocked; the writer is not told and may
 *     copy on), ends the
 *     handoff through handoff.Receiver.end, which in one-sided mode
 *     QUARANTINES the pages (kv Pool.Quarantine) until the writer's drain
 *     acknowledgement (Receiver.Drained -> Pool.DrainAck; shm.Writer.Drained
 *     sends it only once its synchronous copies returned) or until the
 *     lease (Pool.Expire). The lease must outlast ONE page copy (load of
 *     the word to the end of the copy), not a whole stalled batch: the
 *     model lets it expire at any moment except inside a copy.
 *   - A peer declared dead by the heartbeat (handoff/tcp/heartbeat.go:
 *     nothing arrived for --peer-timeout) has its connection closed, so
 *     its calls fail with ErrTransport and the router aborts the handoff
 *     (engine/disagg.go drive: d.abort after a prefill error), and decode
 *     aborts the handoffs a closed connection reserved (handoff/tcp
 *     server.go serveConn): the same quarantine either way, and no drain
 *     acknowledgement can come over the closed connection. Declared dead is not dead: a stopped writer can wake up
 *     and copy later (SIGCONT), which this model lets it do.
 *   - Preemption (decode releases a decoding sequence's pages) and
 *     migration resume the request as a NEW handoff (engine/disagg.go run:
 *     cur.setPair(newID(), ...) / cur.set(newID())) whose reservation is a
 *     new Reserve: new generation on every page. Handoff RESUME below is
 *     the resume of handoff FIRST.
 *
 * One page, shared by NH-1 handoffs one after another (each reserves it
 * when it is free), so every later handoff reuses the page an earlier one
 * may still have a stalled writer for: the worst case for stale bytes.
 *
 * Safety properties (assertions):
 *   I6  a copy lands only in a page its handoff owns at the generation it
 *       reserved (or that is quarantined for it): never in a page since
 *       freed or given to another handoff;
 *   I7  a page handed out by Reserve is scrubbed (holds nobody's bytes);
 *   I3  decode reads a committed page holding exactly its handoff's bytes.
 *
 * Weakened variants, each of which must produce a counterexample:
 *   NO_GEN_WORD       the writer copies without loading the word
 *                     (shm.Writer.NoGenFence): a writer stalled past the
 *                     lease lands in the next owner's page (I6)
 *   WORD_NOT_CLOSED   the pool leaves the word open when it quarantines
 *                     and frees a page (no closeGen): a writer stalled past
 *                     the lease lands in a free, scrubbed page (I7)
 *   HB_RELEASE        a handoff whose prefill peer was declared dead by the
 *                     heartbeat is freed at once (as if drained), without
 *                     the lease: a stopped writer mid-copy lands in the
 *                     next owner's page (I6)
 *   RESUME_OLD_GEN    the resumed handoff reserves the page at the
 *                     preempted or aborted handoff's generation instead of
 *                     a new one: the old handoff's stalled writer passes
 *                     the word and lands in the resume's page (I6)
 */

#ifndef NH
#define NH 4            /* handoffs 1..NH-1 (0 = nobody) */
#endif
#define FIRST  1        /* a request's first handoff */
#define RESUME 2        /* the same request resumed (preempted or migrated) */

#define FREE     0
#define RESERVED 1
#define FILLING  2
#define QUAR     3

byte pstate = FREE;
byte pgen = 0;          /* the page's generation (its tag) */
byte powner = 0;
byte pdata = 0;         /* whose bytes the page holds; 0 = scrubbed */
byte gword = 0;         /* the shared file's generation word of the page */
byte gencounter = 0;
byte firstGen = 0;      /* the generation FIRST reserved (RESUME_OLD_GEN) */

bool incopy[NH];        /* writer h loaded an open word and is copying */
bool wdone[NH];         /* writer h returned: copied, or fenced */
bool hbdead[NH];        /* h's prefill peer was declared dead by the heartbeat */

inline scrubAndFree() {
	/* kv Pool.freeLocked: scrub (I7), then Free; setStateLocked closes
	 * the word first */
#ifndef WORD_NOT_CLOSED
	gword = 0;
#endif
	pdata = 0; powner = 0; pstate = FREE
}

/* shm.Writer: one page copy of handoff h at generation g */
proctype Writer(byte h; byte g) {
	/* any stall can happen here: nothing bounds it */
	atomic {
#ifdef NO_GEN_WORD
		incopy[h] = true
#else
		if
		:: gword == g -> incopy[h] = true	/* SharedGens.Open */
		:: else -> wdone[h] = true; goto out	/* GenFenced: no byte placed */
		fi
#endif
	}
	/* the copy, which the lease outlasts */
	atomic {
		assert(powner == h && pgen == g);	/* I6 */
		pdata = h; incopy[h] = false; wdone[h] = true
	}
out:	skip
}

proctype Handoff(byte h) {
	byte g;
	bool ok;

	/* Reserve (decode): new generation, word opened at it */
	atomic {
		pstate == FREE ->
		assert(pdata == 0);			/* I7 */
#ifdef RESUME_OLD_GEN
		if
		:: h == RESUME && firstGen != 0 -> g = firstGen
		:: else -> gencounter++; g = gencounter
		fi;
#else
		gencounter++; g = gencounter;
#endif
		if
		:: h == FIRST -> firstGen = g
		:: else -> skip
		fi;
		pgen = g; powner = h; pstate = RESERVED; gword = g;
		run Writer(h, g)
	}

	if
	:: /* the writer's notice: decode checks owner and generation (the
	    * control message is two-sided), marks the page written (closing
	    * the word), and the commit's digest is computed from memory */
		wdone[h];
		atomic {
			if
			:: pstate == RESERVED && powner == h && pgen == g ->
				gword = 0; pstate = FILLING
			:: else -> skip
			fi;
			ok = (pstate == FILLING && powner == h && pgen == g && pdata == h)
		}
		if
		:: ok ->
			/* committed: decode attends over the page */
			atomic { assert(pdata == h) }	/* I3 */
			/* finished, or preempted (the request resumes as a
			 * new handoff): release, scrub, free */
			atomic { scrubAndFree() }
			goto done
		:: else -> goto abort	/* fail closed */
		fi
	:: /* aborted by the router (a prefill error, a cancel), or revoked
	    * by decode (the KV quota): either way at any moment before the
	    * commit, the writer copying on until it learns of it */
		goto abort
	:: /* the prefill peer declared dead by the heartbeat: the router's
	    * prefill call fails with ErrTransport and it aborts the handoff */
		hbdead[h] = true; goto abort
	fi;

abort:
	/* Receiver.end, one-sided: Pool.Quarantine (closes the word) */
	atomic {
#ifndef WORD_NOT_CLOSED
		gword = 0;
#endif
		pstate = QUAR
	}
	if
	:: !hbdead[h] && wdone[h] -> skip	/* drain ack: the writer's copies returned */
	:: !incopy[h] -> skip			/* lease expired (Pool.Expire) */
#ifdef HB_RELEASE
	:: hbdead[h] -> skip			/* released because the heartbeat stopped */
#endif
	fi;
	atomic { scrubAndFree() }
done:
	skip
}

init {
	byte i;
	atomic {
		i = 1;
		do
		:: i < NH -> run Handoff(i); i++
		:: else -> break
		od
	}
}
