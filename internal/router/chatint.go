package router

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// Arithmetic as Python's. jinja2's numbers are Python's: integers exact
// at any size (a request's 12345678901234567890123 + 1 is
// 12345678901234567890124), // and % floor (-7 // 2 is -4, 7 % -2 is
// -1), 2 ** 10 an integer, a division by zero an error. gonja's wrapped
// int64s on overflow, truncated // and %, made ** a float and divided by
// zero into inf. The rewritten tree calls pyArith for - / // % ** and
// unary minus, and budgetAdd and budgetMul use it for integers.
//
// An integer is bounded by maxIntDigits, Python's own bound on the
// digits it converts (int_max_str_digits: json.loads refuses a longer
// one, so Hugging Face never renders it): a longer operand or result is
// an error, checked before the work (a tenant's 1 MB of digits squared
// in a loop would otherwise take the router's CPU).
const maxIntDigits = 4300

// maxIntBits is the bit length of the largest integer of maxIntDigits.
const maxIntBits = 14285

// budgetArithFunc is pyArith in the rewritten tree.
const budgetArithFunc = "__sluice_arith"

var errIntTooLarge = fmt.Errorf("an integer of more than %d digits (Python's bound on converting one)", maxIntDigits)

// intOf is v as an integer when it is one (a bool counts, as in
// Python), or an error for a request's integer past maxIntDigits.
func intOf(e *exec.Evaluator, v *exec.Value) (*big.Int, bool, error) {
	switch {
	case isBigInt(v):
		s := string(v.Val.Interface().(pyBigInt))
		if len(strings.TrimLeft(s, "+-")) > maxIntDigits {
			return nil, true, errIntTooLarge
		}
		if err := chargeDigits(e, len(s)); err != nil {
			return nil, true, err
		}
		x, ok := new(big.Int).SetString(s, 10)
		if !ok {
			return nil, true, fmt.Errorf("%q is not an integer", s)
		}
		return x, true, nil
	case v.IsInteger():
		return big.NewInt(int64(v.Integer())), true, nil
	case v.IsBool():
		if v.Bool() {
			return big.NewInt(1), true, nil
		}
		return big.NewInt(0), true, nil
	}
	return nil, false, nil
}

// intValue is x as a template value: an int when it fits, else its
// digits (pyBigInt).
func intValue(e *exec.Evaluator, x *big.Int) (*exec.Value, error) {
	if x.IsInt64() && x.Int64() >= math.MinInt && x.Int64() <= math.MaxInt {
		return exec.AsValue(int(x.Int64())), nil
	}
	if x.BitLen() > maxIntBits {
		return nil, errIntTooLarge
	}
	if err := chargeDigits(e, x.BitLen()*3/10+1); err != nil {
		return nil, err
	}
	s := x.String()
	if len(strings.TrimLeft(s, "-")) > maxIntDigits {
		return nil, errIntTooLarge
	}
	return exec.AsValue(pyBigInt(s)), nil
}

// floatOf is a number as a float (an integer rounded as Python's float()
// rounds it).
func floatOf(e *exec.Evaluator, v *exec.Value) (float64, error) {
	x, ok, err := intOf(e, v)
	if err != nil {
		return 0, err
	}
	if ok {
		f, _ := new(big.Float).SetInt(x).Float64()
		return f, nil
	}
	return v.Float(), nil
}

var errZeroDivision = errors.New("division by zero")

// chargeDigits charges converting n digits (parsing a big integer or
// writing one, about quadratic in its length: 140 us at 4,300 digits) to
// the loop steps, inBytesPerStep digits to a step: a loop doing
// arithmetic on a tenant's longest integers once a step took 140 s of
// CPU within the steps' bound; now about 0.3 s. An int64's are free.
func chargeDigits(e *exec.Evaluator, n int) error {
	if n <= 19 {
		return nil
	}
	if l := loopState(e); l == nil || !l.charge(n/inBytesPerStep) {
		return fmt.Errorf("%w (more than %d loop steps)", ErrTemplateTooMuchWork, maxLoopSteps)
	}
	return nil
}

// pyArith is pyArith(op, a, b) in the rewritten tree: a - b, a / b,
// a // b, a % b, a ** b, and "neg" (-a) as Python computes them on
// integers (of any size, within maxIntDigits) and floats; anything else
// is refused, as Python refuses it.
func pyArith(e *exec.Evaluator, p *exec.VarArgs) (*exec.Value, error) {
	if len(p.Args) < 2 {
		return nil, errors.New("pyArith: an operator and its operands")
	}
	op := p.Args[0].String()
	l := p.Args[1]
	r := exec.AsValue(0)
	if op != "neg" {
		if len(p.Args) != 3 {
			return nil, errors.New("pyArith: two operands")
		}
		r = p.Args[2]
	}
	return arith(e, op, l, r)
}

func arith(e *exec.Evaluator, op string, l, r *exec.Value) (*exec.Value, error) {
	if l.IsInteger() && r.IsInteger() {
		if v, ok := smallArith(op, int64(l.Integer()), int64(r.Integer())); ok {
			return v, nil
		}
	}
	a, aInt, err := intOf(e, l)
	if err != nil {
		return nil, err
	}
	b, bInt, err := intOf(e, r)
	if err != nil {
		return nil, err
	}
	if aInt && bInt {
		return intArith(e, op, a, b)
	}
	if (!aInt && !l.IsFloat()) || (!bInt && !r.IsFloat()) {
		if op == "neg" {
			return nil, fmt.Errorf("bad operand for unary -: %s", kindOf(l))
		}
		return nil, fmt.Errorf("unsupported operands for %s: %s and %s", op, kindOf(l), kindOf(r))
	}
	x, err := floatOf(e, l)
	if err != nil {
		return nil, err
	}
	y, err := floatOf(e, r)
	if err != nil {
		return nil, err
	}
	switch op {
	case "+":
		return exec.AsValue(x + y), nil
	case "-":
		return exec.AsValue(x - y), nil
	case "*":
		return exec.AsValue(x * y), nil
	case "neg":
		return exec.AsValue(-x), nil
	case "**":
		if x == 0 && y < 0 {
			return nil, errZeroDivision
		}
		return exec.AsValue(math.Pow(x, y)), nil
	}
	if y == 0 {
		return nil, errZeroDivision
	}
	switch op {
	case "/":
		return exec.AsValue(x / y), nil
	case "//":
		return exec.AsValue(math.Floor(x / y)), nil
	case "%":
		m := math.Mod(x, y)
		if m != 0 && (m < 0) != (y < 0) {
			m += y
		}
		return exec.AsValue(m), nil
	}
	return nil, fmt.Errorf("unknown operator %s", op)
}

// smallArith is a op b on two ints when the result is an int too
// (templates count with small ones: messages|length - 1 once a message);
// ok false leaves it to intArith (overflow, **, /, a zero divisor).
func smallArith(op string, a, b int64) (*exec.Value, bool) {
	const lim = 1 << 62 // |a|, |b| below it: a+b, a-b fit
	if a <= -lim || a >= lim || b <= -lim || b >= lim {
		return nil, false
	}
	switch op {
	case "+":
		return exec.AsValue(int(a + b)), true
	case "-":
		return exec.AsValue(int(a - b)), true
	case "neg":
		return exec.AsValue(int(-a)), true
	case "*":
		if a > -1<<31 && a < 1<<31 && b > -1<<31 && b < 1<<31 {
			return exec.AsValue(int(a * b)), true
		}
	case "//", "%":
		if b == 0 {
			return nil, false
		}
		q, m := a/b, a%b
		if m != 0 && (m < 0) != (b < 0) {
			q, m = q-1, m+b // Python floors
		}
		if op == "%" {
			return exec.AsValue(int(m)), true
		}
		return exec.AsValue(int(q)), true
	}
	return nil, false
}

// intArith is a op b on integers, its size checked before it is
// computed.
func intArith(e *exec.Evaluator, op string, a, b *big.Int) (*exec.Value, error) {
	z := new(big.Int)
	switch op {
	case "+":
		z.Add(a, b)
	case "-":
		z.Sub(a, b)
	case "neg":
		z.Neg(a)
	case "*":
		if a.BitLen()+b.BitLen() > maxIntBits+1 {
			return nil, errIntTooLarge
		}
		z.Mul(a, b)
	case "**":
		if b.Sign() < 0 {
			if a.Sign() == 0 {
				return nil, errZeroDivision
			}
			x, _ := new(big.Float).SetInt(a).Float64()
			y, _ := new(big.Float).SetInt(b).Float64()
			return exec.AsValue(math.Pow(x, y)), nil
		}
		if a.CmpAbs(big.NewInt(1)) > 0 && (!b.IsInt64() || b.Int64() > maxIntBits || int64(a.BitLen()-1)*b.Int64() > maxIntBits) {
			return nil, errIntTooLarge
		}
		z.Exp(a, b, nil)
	case "/":
		if b.Sign() == 0 {
			return nil, errZeroDivision
		}
		f, _ := new(big.Rat).SetFrac(a, b).Float64()
		return exec.AsValue(f), nil
	case "//", "%":
		if b.Sign() == 0 {
			return nil, errZeroDivision
		}
		q, m := new(big.Int).QuoRem(a, b, new(big.Int))
		if m.Sign() != 0 && m.Sign() != b.Sign() {
			// Python floors: the remainder takes the divisor's sign.
			q.Sub(q, big.NewInt(1))
			m.Add(m, b)
		}
		z = q
		if op == "%" {
			z = m
		}
	default:
		return nil, fmt.Errorf("unknown operator %s", op)
	}
	return intValue(e, z)
}

// templateInt is jinja2's int filter for what gonja's gets wrong: a
// request's big integer stays itself, a string of more digits than an
// int64 holds and a float past its range become Python's exact integer.
// ok false leaves the rest to gonja's.
func templateInt(e *exec.Evaluator, in *exec.Value, p *exec.VarArgs) (*exec.Value, bool, error) {
	if len(p.Args) > 0 || len(p.KwArgs) > 0 {
		return nil, false, nil // a base or a default: gonja's
	}
	switch {
	case isBigInt(in):
		x, _, err := intOf(e, in)
		if err != nil {
			return nil, true, err
		}
		v, err := intValue(e, x)
		return v, true, err
	case in.IsFloat():
		f := in.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) || (f > -9e18 && f < 9e18) {
			return nil, false, nil
		}
		x, _ := new(big.Float).SetFloat64(math.Trunc(f)).Int(nil)
		v, err := intValue(e, x)
		return v, true, err
	case in.IsString():
		s := strings.TrimSpace(in.String())
		digits := strings.TrimLeft(s, "+-")
		if len(s) <= 400 && strings.Trim(digits, "0123456789") != "" {
			// int(float(s)), jinja2's second try: '1e30'|int.
			if f, err := strconv.ParseFloat(s, 64); err == nil {
				return templateInt(e, exec.AsValue(f), p)
			}
		}
		if len(digits) < 19 || len(s)-len(digits) > 1 || strings.Trim(digits, "0123456789") != "" {
			return nil, false, nil
		}
		if _, err := strconv.ParseInt(s, 10, 64); err == nil {
			return nil, false, nil
		}
		if len(digits) > maxIntDigits {
			return nil, true, errIntTooLarge
		}
		x, _ := new(big.Int).SetString(s, 10)
		v, err := intValue(e, x)
		return v, true, err
	}
	return nil, false, nil
}

// numeric: v is a number to Python's arithmetic (a request's big
// integer too).
func numeric(v *exec.Value) bool { return v.IsNumber() || isBigInt(v) }
