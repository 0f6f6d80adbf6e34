/*
 * sluice streaming handoff model (issue 31): a prompt's pages go to decode
 * while later chunks of the same prompt are still being computed. Checked
 * with spin by spec/stream_test.go (TestSpinStream, make spec).
 *
 * What the code does, and where:
 *   - The prefill scheduler computes the prompt chunk by chunk; after each
 *     chunk but the last it reports the positions computed so far
 *     (engine/batcher.go advance -> seq.chunked -> handoff.Progress.
 *     Prefilled); after the last it samples the first token (Finish), or
 *     the forward fails (Fail).
 *   - The streaming Sender (handoff/sender.go NewStreamingSender) sends
 *     block b only when Prefilled covered it whole (ready = fed / page
 *     size, rounded DOWN), checks each page's written slots (every layer)
 *     against the page size before it sends it (wantSlots; a mismatch
 *     aborts), and records the page's hash as it reads it (kv
 *     PageDataSum): the commit's digest combines those recorded hashes.
 *     Up to Window batches are unacknowledged at once.
 *   - The commit goes only after Finish, every block sent and every write
 *     acknowledged as applied. Decode (handoff/receiver.go Commit) accepts
 *     it only when every page was written by this handoff and the digest
 *     matches what it holds; only then does it read the pages (decode
 *     starts the sequence, engine/decode.go Commit -> startLocked).
 *   - A failure (the forward, a refused write, an abort from decode) makes
 *     Push abort: it waits until every Write call it started returned,
 *     then sends Abort and the drain acknowledgement (handoff/push.go
 *     ActAbort). One-sided (shm) writes copy bytes straight into decode's
 *     memory, unchecked by decode, so decode keeps an aborted handoff's
 *     pages quarantined until that acknowledgement; then they are scrubbed
 *     and another handoff may take them.
 *
 * Four positions in two pages of two slots; chunks end after any position
 * (so a chunk can end inside a page); the wire may corrupt a page's bytes
 * (a corruption that also fixes the write checksum) and decode may refuse
 * a write. The writes are one-sided: the worst case for a late landing.
 *
 * Safety properties (assertions):
 *   I5/I4  decode reads pages only after it accepted the commit, and then
 *          exactly the prompt's computed KV (every slot computed, nothing
 *          corrupted);
 *   I6     no write lands in a page after it was freed and given to the
 *          next owner.
 *
 * Weakened variants, each of which must produce a counterexample unless
 * marked backed up:
 *   SEND_PARTIAL        ready rounded UP: a page a chunk filled only in
 *                       part may be sent. Backed up by the slot check: the
 *                       sender refuses the page and aborts (no violation).
 *   SEND_PARTIAL+NO_SLOT_CHECK
 *                       the page goes with slots still to compute; its
 *                       recorded hash is the partial page's, so the
 *                       commit's digest agrees with decode and decode
 *                       reads incomplete KV: the digest alone does not
 *                       catch an early send (I4).
 *   READ_BEFORE_COMMIT  decode reads a page as it arrives: corrupted bytes
 *                       are read before the digest could refuse them (I5).
 *   NO_DIGEST           decode accepts a commit on coverage alone (I5).
 *   DRAIN_EARLY         an aborting sender acknowledges its drain without
 *                       waiting for its writes in flight: a late copy
 *                       lands in the next owner's page (I6).
 */

#define PS 2            /* slots per page */
#define NPOS 4          /* prompt positions */
#define NP 2            /* pages */
#ifndef W
#define W 2             /* window: writes unacknowledged at once */
#endif
#define BAD 9           /* corrupted bytes */

byte slot[NPOS];        /* prefill pool: 1 = position computed in every layer */
byte fed = 0;           /* positions reported computed (Prefilled) */
bool finished = false;  /* Finish: the whole prompt computed */
bool cfail = false;     /* the forward failed mid-prompt */

byte sum[NP];           /* hash recorded when the page was read to send */
byte dpage[NP];         /* decode's copy: slots computed in it, or BAD */
bool dwritten[NP];
byte downer[NP];        /* 1: this handoff (reserved or quarantined), 2: the next owner */
bool accepted = false;

chan wire = [W] of { byte, byte };   /* page, content: a write in flight */
chan acks = [W] of { bool };

proctype Compute() {
	byte pos = 0;
	do
	:: pos < NPOS ->
		slot[pos] = 1; pos++;
		if
		:: pos < NPOS -> fed = pos      /* a chunk ends here: Prefilled(pos) */
		:: skip
		fi
	:: pos < NPOS -> cfail = true; break       /* the forward fails */
	:: pos == NPOS -> atomic { fed = NPOS; finished = true }; break
	od
}

proctype Decoder() {
	byte p, c;
end:	do
	:: wire?p,c ->
		atomic {
			/* I6: a one-sided copy lands unchecked: the page must
			 * still be this handoff's (reserved or quarantined) */
			assert(downer[p] == 1);
			if
			:: dpage[p] = c
			:: dpage[p] = BAD            /* corrupted on the way */
			fi;
			dwritten[p] = true;
#ifdef READ_BEFORE_COMMIT
			assert(dpage[p] == PS);      /* decode attends over it now */
#endif
			if
			:: acks!true
			:: acks!false                /* decode refused the write */
			fi
		}
	od
}

proctype Sender() {
	byte next = 0;
	byte inflight = 0;
	byte c;
	bool ok, bad = false;
	do
	:: atomic {
		!bad && !cfail && next < NP && inflight < W &&
#ifdef SEND_PARTIAL
		next < (fed + PS - 1) / PS ->
#else
		next < fed / PS ->
#endif
		c = slot[next*PS] + slot[next*PS + 1];
#ifndef NO_SLOT_CHECK
		if
		:: c != PS -> bad = true     /* wantSlots: refuse, abort */
		:: else -> skip
		fi;
#endif
		if
		:: !bad -> sum[next] = c; inflight++; wire!next,c; next++
		:: else -> skip
		fi
	   }
	:: acks?ok -> inflight--; bad = bad || !ok
	:: atomic { !bad && !cfail && finished && next == NP && inflight == 0 } ->
		/* the commit, last: decode verifies, then reads */
		atomic {
#ifdef NO_DIGEST
			accepted = dwritten[0] && dwritten[1];
#else
			accepted = dwritten[0] && dwritten[1] && dpage[0] == sum[0] && dpage[1] == sum[1];
#endif
			if
			:: accepted -> assert(dpage[0] == PS && dpage[1] == PS)   /* I5/I4 */
			:: else -> skip
			fi
		};
		break
	:: bad || cfail -> goto abort
	od;
	goto done;
abort:
#ifndef DRAIN_EARLY
	do
	:: inflight > 0 -> acks?ok; inflight--
	:: else -> break
	od;
#endif
	/* Abort (decode quarantines), then the drain acknowledgement:
	 * decode scrubs the pages and the next handoff takes them */
	atomic { downer[0] = 2; downer[1] = 2 };
done:
	skip
}

init {
	atomic {
		downer[0] = 1; downer[1] = 1;
		run Decoder();
		run Compute();
		run Sender()
	}
}
