/*
 * sluice handoff protocol model: reserve / page write (two-sided and
 * one-sided) / commit / abort / quarantine / release / reuse, with late
 * writes, lease expiry and generation fencing. Checked with spin by
 * spec/spin_test.go (make spec).
 *
 * One KV page is shared by NH handoffs, so every handoff after the first
 * reuses a page that an earlier, possibly aborted, handoff may still have a
 * write in flight to: the worst case for stale data.
 *
 * Safety properties (assertions):
 *   I3  a read by a handoff sees only data written by that handoff, on a
 *       page it owns at the generation it reserved;
 *   I5  a commit is accepted only when count, coverage and digest match;
 *   I6  no write, two-sided or one-sided, lands on a page once it belongs
 *       to another owner or generation (no reuse while a write can land).
 *
 * Weakened variants (compile-time macros), each of which must produce a
 * counterexample (the test asserts it):
 *   NO_GEN_CHECK          decode applies two-sided writes without checking
 *                         owner and generation (no fencing)
 *   RELEASE_BEFORE_DRAIN  an abort frees pages at once instead of waiting
 *                         for the one-sided writer's drain or its lease
 *   COMMIT_COUNT_ONLY     decode accepts a commit on its token count alone
 *   SHORT_LEASE           the lease can expire while a one-sided write is
 *                         still in flight (lease shorter than the transport)
 */

#ifndef NH
#define NH 5            /* handoffs: ids 1..NH-1 (0 = nobody) */
#endif

#define FREE     0
#define RESERVED 1
#define FILLING  2
#define QUAR     3

byte pstate = FREE;
byte pgen = 0;          /* generation, bumped on every reservation */
byte powner = 0;        /* owner handoff */
byte pdata = 0;         /* whose data the page holds; 0 = scrubbed */
byte pwriter = 0;       /* handoff whose write decode applied (coverage) */
byte gencounter = 0;

byte inflight[NH];      /* one-sided writes posted and not yet landed */
bool leaseExpired[NH];
byte lateDropped = 0;

/* two-sided PageWrite{handoff, generation}; buffered so writes can be late */
chan wire = [NH] of { byte, byte };

inline scrubAndFree() {
	pdata = 0; pwriter = 0; powner = 0; pstate = FREE
}

/* decode's page-write handler */
proctype Decoder() {
	byte h, g;
end:	do
	:: wire?h,g ->
		atomic {
#ifdef NO_GEN_CHECK
			if
			:: pstate == RESERVED || pstate == FILLING ->
				assert(powner == h && pgen == g);	/* I6 */
				pdata = h; pwriter = h; pstate = FILLING
			:: else -> lateDropped++
			fi
#else
			/* I3/I6: a write applies only to a page its handoff owns at the
			 * generation it reserved; anything else is a late write: dropped */
			if
			:: pstate == RESERVED && powner == h && pgen == g ->
				assert(powner == h && pgen == g);	/* I6 */
				pdata = h; pwriter = h; pstate = FILLING
			:: else -> lateDropped++
			fi
#endif
		}
	od
}

/* a one-sided write (shared memory / RDMA): lands in page memory without
 * any check by decode, at any time until the transport's worst in-flight
 * time, which the lease outlasts. */
proctype Land(byte h; byte g) {
end:	atomic {
#ifndef SHORT_LEASE
		!leaseExpired[h] ->
#endif
		assert(powner == h && pgen == g);	/* I6 */
		pdata = h;
		inflight[h]--
	}
}

proctype Handoff(byte h) {
	byte g;
	bool ok;
	byte claimed;

	/* reserve (decode): all or nothing, new generation, owner stamped */
	atomic {
		pstate == FREE ->
		gencounter++; pgen = gencounter; powner = h;
		pwriter = 0; pstate = RESERVED; g = pgen
	}

	/* prefill: honest or misbehaving, two-sided or one-sided */
	if
	:: /* honest, two-sided: write, wait for the ack, commit */
		wire!h,g;
		(pwriter == h || powner != h);
		claimed = h; goto commit
	:: /* honest, one-sided: post, wait for the landing, notice, commit */
		atomic { inflight[h]++; run Land(h, g) };
		(inflight[h] == 0);
		atomic { if :: pstate == RESERVED && powner == h && pgen == g -> pwriter = h; pstate = FILLING :: else -> skip fi };
		claimed = h; goto commit
	:: /* short transfer: commit claims the full count, nothing written */
		claimed = h; goto commit
	:: /* wrong digest */
		wire!h,g;
		(pwriter == h || powner != h);
		claimed = NH; goto commit
	:: /* abort with a two-sided write in flight (also the prefill
	    * worker dropping a prompt the router gave up between two steps:
	    * it stops writing and aborts, nothing new on the wire) */
		wire!h,g; goto abort
	:: /* abort with a one-sided write in flight */
		atomic { inflight[h]++; run Land(h, g) }; goto abortOneSided
	:: /* revoked by decode before the commit (the KV quota,
	    * engine/decode.go revokeLocked -> Receiver.Abort): the writer is
	    * not told and sends another write after the pages were scrubbed
	    * and freed (and maybe reserved by the next handoff). Both writes
	    * are late: fenced by generation. Its commit finds a tombstone and
	    * is refused without touching the page (Receiver.lookup). */
		wire!h,g;
		atomic { scrubAndFree() };
		wire!h,g;
		goto done
	fi;

commit:
	atomic {
#ifdef COMMIT_COUNT_ONLY
		ok = true;		/* tokens written == reserved, as claimed */
#else
		/* I5: coverage (the page was written exactly by this handoff at
		 * its generation) and digest over what decode holds */
		ok = (pstate == FILLING && powner == h && pgen == g &&
		      pwriter == h && pdata == claimed)
#endif
	}
	if
	:: ok ->
		assert(pwriter == h && pdata == h);		/* I5 */
		/* decode attends over the page: owner and generation checked */
		atomic {
			if
			:: powner == h && pgen == g ->
				assert(pdata == h);		/* I3 */
			:: else -> skip
			fi
		}
		atomic { scrubAndFree() }
	:: else ->
		/* fail closed; two-sided writes are fenced by generation, so
		 * the page can be scrubbed and freed at once */
		atomic { scrubAndFree() }
	fi;
	goto done;

abort:
	atomic { scrubAndFree() };
	goto done;

abortOneSided:
#ifdef RELEASE_BEFORE_DRAIN
	atomic { scrubAndFree() };
#else
	/* I6: quarantine until the writer's drain acknowledgement or the
	 * lease, which outlasts the transport's worst in-flight time */
	pstate = QUAR;
	if
	:: inflight[h] == 0 -> skip			/* drain ack */
	:: atomic { leaseExpired[h] = true }		/* lease expired */
	fi;
	atomic { scrubAndFree() };
#endif
done:
	skip
}

init {
	byte i;
	atomic {
		run Decoder();
		i = 1;
		do
		:: i < NH -> run Handoff(i); i++
		:: else -> break
		od
	}
}
