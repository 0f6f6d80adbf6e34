#include "textflag.h"

// func spinPause()
// PAUSE: tells the core this is a spin-wait, so it yields execution
// resources to a sibling hyperthread and does not flood the memory order
// machinery with speculative loads of the polled word.
TEXT ·spinPause(SB), NOSPLIT, $0-0
	PAUSE
	RET
