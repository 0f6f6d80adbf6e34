/*
 * A decode worker's Abort racing the Commit of the same handoff
 * (internal/engine/decode.go: DecodeWorker.Abort, abortLocal, Commit,
 * Stream, Tick). handoff.pml checks the protocol core (the Receiver),
 * where an abort and a commit are one step each; the worker keeps its own
 * table of handoffs beside the core, and each call takes the core's lock
 * and the table's lock in turn, so Abort's steps (look at the table, the
 * core's abort, look again) interleave with Commit's two (the core
 * accepts, the table takes the pages), and the router's Stream may come
 * before, between or after. Checked with spin by spec/spin_test.go.
 *
 * One handoff, one set of pages, two Aborts of it (the router's and the
 * prefill worker's own after its commit was refused, or a stale sweep's).
 * Property at the end, once every call
 * returned and the worker swept (a started sequence finishes, Tick forgets
 * stale entries and aborts stale reservations):
 *   the pages were released exactly once (no leak, no double release),
 *   and a sequence that started decoding was told of the abort (it did
 *   not decode to its end for a request that was gone).
 *
 * Weakened variants (spin_test.go asserts each):
 *   OLD_ABORT        Abort as it was: its first look handles only a
 *                    committed handoff, the core's abort, then end(),
 *                    which records a failure even on a committed handoff
 *                    and never stops a started one: counterexample
 *   COMMIT_IGNORES_FAILED  Commit takes the pages of a handoff the worker
 *                    already ended: counterexample
 *   NO_SECOND_LOOK   no look after the core's abort: still safe for this
 *                    race (the first look ends the handoff, and Commit
 *                    sees that); the second look is for a Reserve that
 *                    lands in Abort's gap (TestAbortOvertakingReserveInTheGap)
 */

/* the core (Receiver) */
#define R_LIVE     0
#define R_ENDED    1
#define R_ACCEPTED 2
byte rst = R_LIVE;

/* the worker's table entry */
bool inT = true;        /* in w.handoffs */
bool committed = false;
bool failed = false;    /* h.failed: ended, its failure kept for the stream */
bool started = false;
bool streamOpen = false;
bool stopped = false;   /* a started sequence got the abort */

byte releases = 0;      /* times the pages were released */
bool committing = false; /* the core accepted: the pages are Commit's to place */
byte abortsDone = 0;
bool commitDone = false;
bool streamDone = false;

inline release() {
	releases++
}

/* abortLocal: one step under the table's lock */
inline abortLocal() {
	if
	:: inT && started -> stopped = true
	:: inT && !started && committed -> inT = false; release()
	:: inT && !committed && streamOpen -> inT = false		/* the stream gets the error */
	:: inT && !committed && !streamOpen -> failed = true	/* kept for the stream */
	:: else -> skip
	fi
}

proctype Abort() {
#ifdef OLD_ABORT
	/* first look: only a committed one */
	atomic {
		if
		:: inT && started -> stopped = true; goto out
		:: inT && !started && committed -> inT = false; release(); goto out
		:: else -> skip
		fi
	}
#else
	atomic {
		if
		:: inT && (started || committed) -> abortLocal(); goto out
		:: else -> abortLocal()
		fi
	}
#endif
	/* the core's abort: ends a live handoff and releases its pages;
	 * nothing for an accepted one */
	atomic {
		if
		:: rst == R_LIVE -> rst = R_ENDED; release()
		:: else -> skip
		fi
	}
#ifdef OLD_ABORT
	/* end(): h == nil or started: nothing; no stream: record the failure
	 * (committed or not); else forget it and fail the stream */
	atomic {
		if
		:: !inT || started -> skip
		:: else ->
			if
			:: !streamOpen -> failed = true
			:: else -> inT = false
			fi
		fi
	}
#else
#ifndef NO_SECOND_LOOK
	atomic { abortLocal() }
#endif
#endif
out:
	abortsDone++
}

proctype Commit() {
	/* the core verifies and accepts, handing the pages over */
	atomic {
		if
		:: rst == R_LIVE -> rst = R_ACCEPTED; committing = true
		:: else -> skip		/* refused: the core released them */
		fi
	}
	/* the table takes them (one step under its lock) */
	atomic {
		if
		:: committing ->
			committing = false;
			if
#ifdef COMMIT_IGNORES_FAILED
			:: !inT -> release()
#else
			:: !inT || failed -> release()
#endif
			:: else ->
				committed = true;
				if
				:: streamOpen -> started = true
				:: else -> skip
				fi
			fi
		:: else -> skip
		fi
	}
	commitDone = true
}

/* the router's stream, when it was not open before the prefill */
proctype Stream() {
	atomic {
		if
		:: !inT -> skip				/* unknown handoff */
		:: inT && failed -> inT = false		/* the error, then forgotten */
		:: else ->
			streamOpen = true;
			if
			:: committed -> started = true
			:: else -> skip
			fi
		fi
	}
	streamDone = true
}

init {
	/* the router opens the stream before the prefill (the usual order),
	 * or its Stream call races the rest */
	if
	:: atomic { streamOpen = true; streamDone = true; run Abort(); run Abort(); run Commit() }
	:: atomic { run Abort(); run Abort(); run Commit(); run Stream() }
	fi;
	(abortsDone == 2 && commitDone && streamDone);
	/* the sweep: a started sequence finishes (its pages released);
	 * Tick forgets a failed entry (it holds no pages) and aborts a stale
	 * committed one (its pages released) */
	atomic {
		if
		:: inT && started -> inT = false; release()
		:: inT && !started && failed -> inT = false
		:: inT && !started && committed -> inT = false; release()
		:: else -> skip
		fi
	}
	assert(releases == 1 && (!started || stopped))
}
