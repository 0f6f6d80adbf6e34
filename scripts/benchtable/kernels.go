package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The targets of issue 31 item 5 (prefill, decode bandwidth) and of its
// depth table (every ratio).
const (
	prefillTarget = 1.5
	bwTarget      = 0.9
	depthTarget   = 1.0
	// inCache: decode weights this small stay in the caches, where the
	// bandwidth fraction means nothing.
	inCache = 64 << 20
)

// run is one JSON file of scripts/bench-kernels.sh: PART-CONFIG.json, with
// PART-CONFIG.meta holding "DATE LOAD0 LOAD1".
type run struct {
	part, config string
	model        string // moe: the file's one model
	date, load   string
	rows         []row
}

var configOrder = []string{"avx512-t1", "avx512-t2", "avx2-t1", "avx2-t2", "avx2novnni-t1", "avx2novnni-t2"}

var partTitles = map[string]string{
	"item5":       "Kernel goals (issue 31 item 5): prefill ratio >= 1.5x, decode >= 90% of the read bandwidth",
	"dense":       "Dense qwen3 and gemma3 shapes (issue 24)",
	"depth-quick": "At depth, bench-110M shape (36k context), quick subset",
	"depth-b110":  "At depth, bench-110M shape (36k context)",
	"depth-tl":    "At depth, TinyLlama-q4_K shape (20k context)",
	"moe":         "Mixture of experts (issue 24): q3moe and glm shapes",
}

var partOrder = []string{"item5", "dense", "depth-quick", "depth-b110", "depth-tl", "moe"}

func configLabel(c string) string {
	path, th, _ := strings.Cut(c, "-t")
	p := map[string]string{"avx512": "AVX-512", "avx2": "AVX2 (AVX-VNNI)", "avx2novnni": "AVX2"}[path]
	if th == "1" {
		return p + " | 1 pinned"
	}
	return p + " | " + th
}

func loadRuns(files []string) ([]*run, error) {
	var runs []*run
	for _, f := range files {
		base := strings.TrimSuffix(filepath.Base(f), ".json")
		i := -1
		for _, c := range configOrder {
			if strings.HasSuffix(base, "-"+c) {
				i = len(base) - len(c) - 1
				break
			}
		}
		if i < 0 {
			continue // not a bench-kernels file
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var r report
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %v", f, err)
		}
		x := &run{part: base[:i], config: base[i+1:], rows: r.Rows}
		if strings.HasPrefix(x.part, "moe-") {
			// scripts/bench-moe.sh: one file per model and configuration
			// (moe-MODEL-CONFIG.json), one table.
			x.model, x.part = strings.TrimPrefix(x.part, "moe-"), "moe"
		}
		if m, err := os.ReadFile(strings.TrimSuffix(f, ".json") + ".meta"); err == nil {
			if fs := strings.Fields(string(m)); len(fs) == 3 {
				x.date, x.load = fs[0], fs[1]+"-"+fs[2]
			}
		}
		// Pieces of one part and configuration measured separately (depth
		// subsets in their own OUT directories) make one run: a later
		// file's rows replace an earlier one's of the same model and test.
		if i := slices.IndexFunc(runs, func(r *run) bool { return r.part == x.part && r.config == x.config && r.model == x.model }); i >= 0 {
			runs[i].merge(x)
			continue
		}
		runs = append(runs, x)
	}
	slices.SortStableFunc(runs, func(a, b *run) int {
		return slices.Index(configOrder, a.config) - slices.Index(configOrder, b.config)
	})
	return runs, nil
}

func (r *run) merge(x *run) {
	for _, y := range x.rows {
		if i := slices.IndexFunc(r.rows, func(z row) bool { return z.Model == y.Model && z.Test == y.Test }); i >= 0 {
			r.rows[i] = y
		} else {
			r.rows = append(r.rows, y)
		}
	}
	if x.date != "" && !strings.Contains(r.date, x.date) {
		r.date = strings.TrimPrefix(r.date+", "+x.date, ", ")
	}
	if x.load != "" {
		r.load = strings.TrimPrefix(r.load+", "+x.load, ", ")
	}
}

// partHeading is part's heading for tables measured on cpu: its title
// and the CPU's short name, so that one vendor's tables and another's in
// the same document (between their own markers) have headings, and
// anchors, of their own.
func partHeading(part, cpu string) string {
	name, _, _ := strings.Cut(cpu, " (")
	for _, mark := range []string{"(R)", "(TM)", " Processor"} {
		name = strings.ReplaceAll(name, mark, "")
	}
	if f := strings.Fields(name); len(f) > 2 {
		name = strings.Join(f[:2], " ")
	}
	if name = strings.TrimSpace(name); name == "" {
		return partTitles[part]
	}
	return partTitles[part] + ", on the " + name
}

// kernelTables prints one markdown table per part found among files.
func kernelTables(w io.Writer, files []string, cpu, commit string) error {
	runs, err := loadRuns(files)
	if err != nil {
		return err
	}
	for _, part := range partOrder {
		var rs []*run
		for _, r := range runs {
			if r.part == part {
				rs = append(rs, r)
			}
		}
		if len(rs) == 0 {
			continue
		}
		fmt.Fprintf(w, "#### %s\n\n", partHeading(part, cpu))
		var dates, loads []string
		for _, r := range rs {
			for _, d := range strings.Split(r.date, ", ") {
				if d != "" && !slices.Contains(dates, d) {
					dates = append(dates, d)
				}
			}
			if r.load != "" {
				label := configLabel(r.config)
				if r.model != "" {
					label = r.model + " " + label
				}
				loads = append(loads, label+" "+r.load)
			}
		}
		script := "scripts/bench-kernels.sh " + partArg(part)
		if part == "moe" {
			script = "scripts/bench-moe.sh"
		}
		fmt.Fprintf(w, "%s, %s, commit %s, `%s`; load average at the start-end of each configuration: %s.\n\n",
			cpu, strings.Join(dates, ", "), commit, script,
			strings.ReplaceAll(strings.Join(loads, "; "), " | ", " "))
		if strings.HasPrefix(part, "depth") {
			depthTable(w, rs)
		} else {
			speedTable(w, rs, part == "item5", part == "moe")
		}
	}
	return nil
}

// partArg is the scripts/bench-kernels.sh argument that makes part.
func partArg(part string) string {
	if part == "depth-b110" || part == "depth-tl" {
		return "depth"
	}
	return part
}

// speedTable: one row per (model, configuration), one column per test,
// then the decode bandwidth fraction. targets: issue 31's goals, else
// ratios below 1.0. moe: the decode weight bytes are the routed ones (a
// token's chosen experts), and llama.cpp's fraction (its tg rate over the
// same read bandwidth) is a column of its own.
func speedTable(w io.Writer, rs []*run, targets, moe bool) {
	var tests []string
	for _, r := range rs {
		for _, x := range r.rows {
			if !slices.Contains(tests, x.Test) {
				tests = append(tests, x.Test)
			}
		}
	}
	fmt.Fprint(w, "| model | path | threads |")
	for _, t := range tests {
		fmt.Fprintf(w, " %s sluice / llama.cpp / ratio |", t)
	}
	if moe {
		fmt.Fprintln(w, " routed bytes / token | decode bw fraction sluice wall · per CPU-s | llama.cpp |")
	} else {
		fmt.Fprintln(w, " decode bw fraction wall · per CPU-s |")
	}
	fmt.Fprint(w, "|---|---|---:|")
	for range tests {
		fmt.Fprint(w, "---:|")
	}
	if moe {
		fmt.Fprint(w, "---:|---:|")
	}
	fmt.Fprintln(w, "---:|")
	var below []string
	for _, r := range rs {
		var models []string
		for _, x := range r.rows {
			if !slices.Contains(models, x.Model) {
				models = append(models, x.Model)
			}
		}
		for _, m := range models {
			line, bw, routed, lbw := "", "—", "—", "—"
			for _, t := range tests {
				i := slices.IndexFunc(r.rows, func(x row) bool { return x.Model == m && x.Test == t })
				if i < 0 {
					line += " — |"
					continue
				}
				x := r.rows[i]
				line += fmt.Sprintf(" %s / %s / **%.2fx** |", num(x.TokS), num(x.LlamaTokS), x.Ratio)
				if x.BWFraction > 0 {
					bw = fmt.Sprintf("%.0f%% · %.0f%%", 100*x.BWFraction, 100*x.CPUBWFraction)
					routed = fmt.Sprintf("%.0f MB", x.WeightBytes/1e6)
					if x.ReadGBps > 0 && x.LlamaTokS > 0 {
						lbw = fmt.Sprintf("%.0f%%", 100*x.WeightBytes*x.LlamaTokS/(x.ReadGBps*1e9))
					}
					if x.WeightBytes < inCache {
						bw += " (in cache)"
					} else if targets && x.BWFraction < bwTarget {
						below = append(below, fmt.Sprintf("%s %s %s bw %.0f%%", m, configLabel(r.config), t, 100*x.BWFraction))
					}
				}
				if targets && strings.HasPrefix(t, "pp") && x.Ratio < prefillTarget {
					below = append(below, fmt.Sprintf("%s %s %s %.2fx", m, configLabel(r.config), t, x.Ratio))
				}
				if !targets && x.Ratio < depthTarget {
					below = append(below, fmt.Sprintf("%s %s %s %.2fx", m, configLabel(r.config), t, x.Ratio))
				}
			}
			if moe {
				fmt.Fprintf(w, "| %s | %s |%s %s | %s | %s |\n", m, configLabel(r.config), line, routed, bw, lbw)
			} else {
				fmt.Fprintf(w, "| %s | %s |%s %s |\n", m, configLabel(r.config), line, bw)
			}
		}
	}
	fmt.Fprintln(w)
	if targets {
		fmt.Fprintf(w, "Below the targets (prefill %.1fx, decode %.0f%% of the read bandwidth for models larger than the caches): ", prefillTarget, 100*bwTarget)
	} else {
		fmt.Fprint(w, "Ratios below 1.0: ")
	}
	if len(below) == 0 {
		fmt.Fprintln(w, "none.")
	} else {
		fmt.Fprintln(w, strings.ReplaceAll(strings.Join(below, "; "), " | ", " ")+".")
	}
	fmt.Fprintln(w)
}

// depthTable: one row per (model, configuration), one column per depth,
// each cell the pp and tg ratios.
func depthTable(w io.Writer, rs []*run) {
	var depths []int
	depthOf := func(t string) int {
		_, d, ok := strings.Cut(t, "@d")
		if !ok {
			return 0
		}
		n, _ := strconv.Atoi(d)
		return n
	}
	var pp, tg string
	for _, r := range rs {
		for _, x := range r.rows {
			if d := depthOf(x.Test); !slices.Contains(depths, d) {
				depths = append(depths, d)
			}
			name, _, _ := strings.Cut(x.Test, "@")
			if strings.HasPrefix(name, "pp") {
				pp = name
			} else {
				tg = name
			}
		}
	}
	slices.Sort(depths)
	// The decode bandwidth column: at depth 16384 (issue 31's), else the
	// deepest measured.
	bwDepth := depths[len(depths)-1]
	if slices.Contains(depths, 16384) {
		bwDepth = 16384
	}
	fmt.Fprint(w, "| model | path | threads |")
	for _, d := range depths {
		fmt.Fprintf(w, " depth %d: %s / %s ratio |", d, pp, tg)
	}
	fmt.Fprintf(w, " %s@d%d read-bandwidth fraction: sluice / llama.cpp |\n", tg, bwDepth)
	fmt.Fprint(w, "|---|---|---:|")
	for range depths {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w, "---:|")
	var below []string
	for _, r := range rs {
		var models []string
		for _, x := range r.rows {
			if !slices.Contains(models, x.Model) {
				models = append(models, x.Model)
			}
		}
		for _, m := range models {
			line := ""
			for _, d := range depths {
				cell := []string{"—", "—"}
				for _, x := range r.rows {
					if x.Model != m || depthOf(x.Test) != d {
						continue
					}
					k := 1
					if strings.HasPrefix(x.Test, "pp") {
						k = 0
					}
					cell[k] = fmt.Sprintf("%.2fx", x.Ratio)
					if x.Ratio < depthTarget {
						cell[k] = "**" + cell[k] + "**"
						below = append(below, fmt.Sprintf("%s %s %s %.2fx (%s / %s tok/s)", m, configLabel(r.config), x.Test, x.Ratio, num(x.TokS), num(x.LlamaTokS)))
					}
				}
				line += " " + cell[0] + " / " + cell[1] + " |"
			}
			bw := "—"
			for _, x := range r.rows {
				if x.Model == m && depthOf(x.Test) == bwDepth && !strings.HasPrefix(x.Test, "pp") && x.KVBytes > 0 && x.ReadGBps > 0 {
					// (weights + K/V) per token x tok/s over the read
					// bandwidth sluice measured beside it; llama.cpp reads
					// the same F16 K/V and weights per token.
					step := (x.WeightBytes + x.KVBytes) / (x.ReadGBps * 1e9)
					bw = fmt.Sprintf("%.0f%% / %.0f%%", 100*step*x.TokS, 100*step*x.LlamaTokS)
				}
			}
			fmt.Fprintf(w, "| %s | %s |%s %s |\n", m, configLabel(r.config), line, bw)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "Ratios below 1.0 (bold): ")
	if len(below) == 0 {
		fmt.Fprintln(w, "none.")
	} else {
		fmt.Fprintln(w, strings.ReplaceAll(strings.Join(below, "; "), " | ", " ")+".")
	}
	fmt.Fprintln(w)
}

// spliceFile replaces the lines strictly between "<!-- MARKER:begin -->"
// and "<!-- MARKER:end -->" in file with text.
func spliceFile(file, marker string, text io.Reader) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	repl, err := io.ReadAll(text)
	if err != nil {
		return err
	}
	begin, end := "<!-- "+marker+":begin -->", "<!-- "+marker+":end -->"
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	state := 0 // 0 before, 1 inside, 2 after
	for sc.Scan() {
		l := sc.Text()
		switch {
		case state == 0 && strings.TrimSpace(l) == begin:
			out.WriteString(l + "\n")
			out.Write(bytes.TrimRight(repl, "\n"))
			out.WriteString("\n")
			state = 1
			continue
		case state == 1 && strings.TrimSpace(l) == end:
			state = 2
		case state == 1:
			continue
		}
		out.WriteString(l + "\n")
	}
	if state != 2 {
		return fmt.Errorf("%s has no %s ... %s lines", file, begin, end)
	}
	return os.WriteFile(file, out.Bytes(), 0o644)
}
