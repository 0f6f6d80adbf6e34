/*
 * sluice prefix-cache page model: a full page is sealed, handed to a cache
 * entry and read by several sequences at once (reader shares), while
 * allocation pressure evicts idle entries, stale writers try to write the
 * page and one-sided writers hold references to it. Checked with spin by
 * spec/spin_test.go (TestSpinModels, make spec).
 *
 * What the code does, and where (internal/kv/cache.go unless named):
 *   - Insert takes a full Sealed page of its sequence into the index and
 *     gives the inserting sequence a reader share (addShareLocked); Lookup
 *     gives each later sequence a share; Release of a cached page drops
 *     the share (dropShareLocked). A page with no reader is idle: on the
 *     LRU if still indexed, evicted at once if it was invalidated while
 *     read, waiting out a lease if it was quarantined.
 *   - Only an idle entry is evicted (victimLocked / evictLocked panics on
 *     a read one): eviction bumps the generation, scrubs (I7) and frees;
 *     the page is then reserved by anyone.
 *   - A reader's View checks the page's tag (generation and state) on every
 *     access (kv/view.go), but the check and the read of the bytes are two
 *     steps: only the share keeps the page from being evicted and reused
 *     between them.
 *   - Nothing writes a cached page: a Put or transfer write naming it is a
 *     sealed_write violation (checkCachedLocked), the page is quarantined
 *     and unindexed, its readers fail closed, and it leaves only after its
 *     last reader and a lease (quarantineCachedLocked, dropShareLocked).
 *   - A one-sided writer is kept off it twice: the shm writer refuses a
 *     reservation's prefix blocks (handoff/shm/shm.go post: ErrSealedWrite)
 *     and the page's generation word is closed (0) once the page left
 *     Reserved (kv/shm.go), so SharedGens.Open fails for it.
 *
 * Actors: the sequence S that computed the page (it seals it, may insert
 * it, reads it, may issue a straggling write into it, releases it); NR
 * readers that look it up; a later handoff whose one-sided writer names
 * the page as a block of its reservation; and a new owner under allocation
 * pressure that evicts the page if idle and writes its own bytes.
 *
 * Safety property (assertion): a sequence whose tag check passed reads
 * the sealed bytes, whoever else acts meanwhile (I3, I11: a shared page
 * stays what was sealed, for as long as anyone reads it).
 *
 * Weakened variants, each of which must produce a counterexample:
 *   NO_SEALED_CHECK      the pool applies a write to a cached page
 *   EVICT_WITH_READERS   eviction takes a cached page that still has readers
 *   NO_INSERT_SHARE      Insert does not count the inserting sequence as a
 *                        reader (its count starts one short)
 *   SEALED_ONESIDED      the shm writer does not refuse prefix blocks AND
 *                        the pool leaves the word open after the write
 * and one that must NOT (a layer another layer backs up):
 *   NO_PREFIX_REFUSAL    only the shm writer's prefix refusal is off: the
 *                        closed generation word still fences the copy
 */

#ifndef NR
#define NR 2            /* readers besides the computing sequence */
#endif

#define FREE   0
#define OWNED  1        /* Reserved/Filling: written by its owner */
#define SEALED 2
#define QUAR   3

#define SEQ    1        /* the computing sequence's bytes */
#define OTHER  8        /* a new owner's bytes */
#define STALE  9        /* a writer's bytes that must never land */

byte pstate = FREE;
byte pgen = 0;
byte pdata = 0;
byte gword = 0;         /* the shared file's generation word */
byte gencounter = 0;
bool cached = false;
bool indexed = false;
byte readers = 0;
byte sealedData = 0;    /* what the page held when sealed */
bool leased = false;    /* a quarantined page waiting out its lease */

inline evict() {
	/* evictLocked: uncache, new generation, scrub, free */
	cached = false; indexed = false;
	gencounter++; pgen = gencounter;
	gword = 0; pdata = 0; pstate = FREE
}

/* dropShareLocked */
inline dropShare() {
	readers--;
	if
	:: readers == 0 && pstate == QUAR -> cached = false; leased = true
	:: readers == 0 && pstate != QUAR && !indexed -> evict()
	:: else -> skip	/* idle on the LRU, or still read */
	fi
}

/* a read through a View: the tag check, then the bytes */
inline read(g) {
	if
	:: atomic { pgen == g && pstate == SEALED } ->
		/* the check passed; the bytes are read after it */
		assert(pdata == sealedData)
	:: else -> skip	/* refused: stale generation or quarantined (fail closed) */
	fi
}

/* a write through the pool's checks (View.Put, WritePage) naming page at g */
inline poolWrite(g) {
	atomic {
		if
		:: pgen == g && pstate == SEALED ->
#ifdef NO_SEALED_CHECK
			pdata = STALE
#else
			/* sealed_write: quarantined, unindexed, readers fail closed */
			pstate = QUAR; indexed = false;
			if
			:: readers == 0 -> cached = false; leased = true
			:: else -> skip
			fi
#endif
		:: else -> skip	/* stale generation: refused */
		fi
	}
}

proctype Seq() {
	byte g;
	bool ins = false;
	atomic {
		pstate == FREE ->
		gencounter++; pgen = gencounter; g = pgen;
		pstate = OWNED; gword = g
	}
	/* the page's write: marked written, word closed (setStateLocked) */
	atomic {
		pdata = SEQ;
#ifndef SEALED_ONESIDED
		gword = 0
#endif
	}
	atomic { pstate = SEALED; sealedData = pdata }
	if
	:: atomic {
		/* Insert: the entry owns the page, S holds a share */
		cached = true; indexed = true;
#ifndef NO_INSERT_SHARE
		readers++;
#endif
		ins = true
	   }
	:: skip	/* kept private (already cached, or over quota) */
	fi;
	read(g);
	if
	:: poolWrite(g)	/* a straggling write of S into its own sealed page */
	:: skip
	fi;
	read(g);
	/* Release */
	atomic {
		if
		:: ins && cached -> dropShare()
		:: ins && !cached -> skip	/* a bug variant already freed it */
		:: !ins && pstate == SEALED && pgen == g -> gword = 0; pdata = 0; pstate = FREE
		:: !ins && pstate == QUAR && pgen == g -> leased = true
		:: else -> skip
		fi
	}
}

proctype Reader() {
	byte g;
	atomic {
		if
		:: cached && indexed && pstate == SEALED ->	/* Lookup hit */
			readers++; g = pgen
		:: else -> goto out				/* miss: computes its own */
		fi
	}
	read(g);
	read(g);
	atomic {
		if
		:: cached -> dropShare()
		:: else -> skip	/* a bug variant already evicted it */
		fi
	};
out:	skip
}

/* a later handoff's one-sided writer whose reservation names the cached
 * page as one of its blocks (a prefix hit on decode) */
proctype PrefixWriter() {
	byte g;
end:	atomic { cached && pstate == SEALED -> g = pgen };
#ifndef NO_PREFIX_REFUSAL
#ifndef SEALED_ONESIDED
	goto out;	/* ErrSealedWrite: no byte placed */
#endif
#endif
	atomic {
		if
		:: gword == g -> pdata = STALE	/* copied */
		:: else -> skip			/* GenFenced */
		fi
	}
out:	skip
}

/* a new owner under allocation pressure: evicts the page when it is idle
 * (evictForLocked), or takes it once free, and writes its own bytes */
proctype NewOwner() {
end:	atomic {
		if
#ifdef EVICT_WITH_READERS
		:: cached && pstate == SEALED -> evict()
#else
		:: cached && pstate == SEALED && readers == 0 -> evict()
#endif
		:: leased -> leased = false; pdata = 0; pstate = FREE	/* lease expired */
		:: pstate == FREE -> skip
		fi;
		gencounter++; pgen = gencounter;
		pstate = OWNED; gword = pgen;
		pdata = OTHER; gword = 0
	}
	/* released: scrubbed and freed */
	atomic { pdata = 0; pstate = FREE }
}

init {
	byte i;
	atomic {
		run Seq();
		run PrefixWriter();
		run NewOwner();
		i = 0;
		do
		:: i < NR -> run Reader(); i++
		:: else -> break
		od
	}
}
