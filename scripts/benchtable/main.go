// Command benchtable prints the markdown tables of docs/benchmarks.md's side-by-side
// speed section from the JSON files scripts/bench-table.sh writes (one per
// kernel path and thread count, each the output of `sluice bench --json
// --llama-bench`). It only formats: every figure and ratio is sluice bench's.
//
//	go run ./scripts/benchtable OUT/avx512-t1.json OUT/avx512-t2.json ...
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type row struct {
	Model         string  `json:"model"`
	Threads       int     `json:"threads"`
	Test          string  `json:"test"`
	TokS          float64 `json:"tokens_per_s"`
	CPUTokS       float64 `json:"tokens_per_cpu_s"`
	LlamaTokS     float64 `json:"llama_cpp_tokens_per_s"`
	Ratio         float64 `json:"ratio"`
	WeightBytes   float64 `json:"decode_weight_bytes"`
	KVBytes       float64 `json:"decode_kv_bytes"`
	ReadGBps      float64 `json:"read_gb_per_s"`
	BWFraction    float64 `json:"bandwidth_fraction"`
	CPUBWFraction float64 `json:"cpu_bandwidth_fraction"`
}

type report struct {
	Kernels string `json:"kernels"`
	CPU     string `json:"cpu_features"`
	Rows    []row  `json:"rows"`
}

func main() {
	kernelsMode := flag.Bool("kernels", false, "print scripts/bench-kernels.sh's tables (files named PART-CONFIG.json)")
	cpu := flag.String("cpu", "", "CPU name for the captions (-kernels)")
	commit := flag.String("commit", "", "commit measured, for the captions (-kernels)")
	splice := flag.String("splice", "", "replace the text between FILE's <!-- MARKER:begin --> and <!-- MARKER:end --> lines with standard input")
	marker := flag.String("marker", "bench-kernels", "marker name for -splice")
	flag.Parse()
	if *splice != "" {
		if err := spliceFile(*splice, *marker, os.Stdin); err != nil {
			fmt.Fprintln(os.Stderr, "benchtable:", err)
			os.Exit(1)
		}
		return
	}
	if flag.NArg() < 1 {
		fmt.Fprintln(os.Stderr, "usage: benchtable [-kernels -cpu NAME -commit REV] FILE.json ... | benchtable -splice FILE [-marker NAME] <TEXT")
		os.Exit(2)
	}
	if *kernelsMode {
		if err := kernelTables(os.Stdout, flag.Args(), *cpu, *commit); err != nil {
			fmt.Fprintln(os.Stderr, "benchtable:", err)
			os.Exit(1)
		}
		return
	}
	worst := map[string]float64{} // test -> lowest ratio over every table
	for _, f := range flag.Args() {
		b, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchtable:", err)
			os.Exit(1)
		}
		var r report
		if err := json.Unmarshal(b, &r); err != nil {
			fmt.Fprintf(os.Stderr, "benchtable: %s: %v\n", f, err)
			os.Exit(1)
		}
		printTable(strings.TrimSuffix(filepath.Base(f), ".json"), &r, worst)
	}
	tests := make([]string, 0, len(worst))
	for t := range worst {
		tests = append(tests, t)
	}
	sort.Strings(tests)
	fmt.Print("Lowest ratio per test over all tables:")
	for _, t := range tests {
		fmt.Printf(" %s %.2fx", t, worst[t])
	}
	fmt.Println()
}

func printTable(name string, r *report, worst map[string]float64) {
	var models, tests []string
	cell := map[[2]string]row{}
	for _, x := range r.Rows {
		k := [2]string{x.Model, x.Test}
		if _, ok := cell[k]; ok {
			continue
		}
		cell[k] = x
		if !contains(models, x.Model) {
			models = append(models, x.Model)
		}
		if !contains(tests, x.Test) {
			tests = append(tests, x.Test)
		}
	}
	fmt.Printf("%s (kernels: %s; cpu: %s):\n\n", name, r.Kernels, r.CPU)
	fmt.Print("| model | threads |")
	for _, t := range tests {
		fmt.Printf(" %s sluice / llama.cpp / ratio |", t)
	}
	fmt.Println(" decode bw fraction wall · per CPU-s |")
	fmt.Print("|---|---:|")
	for range tests {
		fmt.Print("---:|")
	}
	fmt.Println("---:|")
	for _, m := range models {
		var th int
		bw := "—"
		line := ""
		for _, t := range tests {
			x, ok := cell[[2]string{m, t}]
			if !ok {
				line += " — |"
				continue
			}
			th = x.Threads
			line += fmt.Sprintf(" %s / %s / **%.2fx** |", num(x.TokS), num(x.LlamaTokS), x.Ratio)
			if w, ok := worst[t]; !ok || x.Ratio < w {
				worst[t] = x.Ratio
			}
			if x.BWFraction > 0 {
				bw = fmt.Sprintf("%.0f%% · %.0f%%", 100*x.BWFraction, 100*x.CPUBWFraction)
			}
		}
		fmt.Printf("| %s | %d |%s %s |\n", m, th, line, bw)
	}
	fmt.Println()
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// num prints a tokens/s figure with three significant digits or more.
func num(v float64) string {
	switch {
	case v >= 1000:
		s := fmt.Sprintf("%.0f", v)
		for i := len(s) - 3; i > 0; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		return s
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
