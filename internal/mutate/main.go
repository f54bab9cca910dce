// Command mutate runs mutation testing (go-gremlins, pinned in tools.go) over
// a list of packages, one package at a time, and prints a per-package table
// of killed, lived, timed-out and not-covered mutants with the kill rate,
// followed by every surviving mutant so each can be killed by a test or
// argued equivalent.
//
// It is `make mutate`, not part of `make check`: a package costs minutes.
// It must never edit the tree it is run in: gremlins mutates copies in
// temporary directories, and this command only reads their JSON reports.
package main

import (
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// report is the part of gremlins' -o JSON this command reads.
type report struct {
	Files []struct {
		Name      string `json:"file_name"`
		Mutations []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
			Line   int    `json:"line"`
			Column int    `json:"column"`
		} `json:"mutations"`
	} `json:"files"`
	Elapsed float64 `json:"elapsed_time"`
}

// mutant is one surviving mutation: where it is and what gremlins changed.
type mutant struct {
	file         string
	line, column int
	kind         string
}

type row struct {
	pkg                                        string
	killed, lived, timedOut, notCovered, other int
	elapsed                                    time.Duration
	survivors                                  []mutant
	err                                        error
}

// rate is the kill rate of covered mutants: killed and timed out over
// killed, timed out and lived (a timed-out mutant was detected, as in PIT and
// Stryker; its column lets a reader recompute without it).
func (r row) rate() string {
	caught := r.killed + r.timedOut
	if caught+r.lived == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(caught)/float64(caught+r.lived))
}

func main() {
	pkgs := flag.String("pkgs", "", "space-separated package directories, relative to the module root (make mutate passes MUTATE_PKGS)")
	workers := flag.Int("workers", 1, "gremlins workers (each runs one mutant's tests at a time)")
	coefficient := flag.Int("timeout-coefficient", 10, "a mutant's test run may take this many times the coverage run")
	files := flag.String("files", "", "space-separated file names: mutate only these files of each package (for a package too slow to run whole)")
	floor := flag.Duration("timeout-floor", 90*time.Second, "the least time a mutant's test run (build included) gets before it counts as timed out")
	out := flag.String("out", "bin/mutate", "directory for gremlins' JSON reports and logs")
	flag.Parse()
	if strings.TrimSpace(*pkgs) == "" {
		fatal(fmt.Errorf("no packages: -pkgs 'client/cost agentd/internal/tarx'"))
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fatal(err)
	}
	gremlins, err := filepath.Abs(filepath.Join(*out, "gremlins"))
	if err != nil {
		fatal(err)
	}
	build := exec.Command("go", "build", "-o", gremlins, "github.com/go-gremlins/gremlins/cmd/gremlins")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fatal(fmt.Errorf("building gremlins: %w", err))
	}
	var rows []row
	for _, pkg := range strings.Fields(*pkgs) {
		rows = append(rows, run(gremlins, pkg, strings.Fields(*files), *out, *workers, *coefficient, *floor))
	}
	print(os.Stdout, rows)
	for _, r := range rows {
		if r.err != nil {
			os.Exit(1)
		}
	}
}

func run(gremlins, pkg string, only []string, out string, workers, coefficient int, floor time.Duration) row {
	pkg = strings.TrimSuffix(strings.TrimPrefix(pkg, "./"), "/")
	r := row{pkg: pkg}
	// gremlins gives a mutant coefficient times its coverage run, which for
	// a small package is well under the time a loaded machine needs to
	// rebuild and link the mutated test binary: every such mutant would
	// "time out". Timing the same run here lets the coefficient be raised so
	// that no mutant gets less than floor.
	cover := exec.Command("go", "test", "-count=1", "-cover", "./"+pkg+"/...")
	cover.Stdout, cover.Stderr = io.Discard, io.Discard
	t0 := time.Now()
	if err := cover.Run(); err != nil {
		r.err = fmt.Errorf("the package's tests fail unmutated: %w", err)
		return r
	}
	if took := time.Since(t0); time.Duration(coefficient)*took < floor {
		coefficient = int(floor/took) + 1
	}
	name := strings.ReplaceAll(pkg, "/", "_")
	jsonPath := filepath.Join(out, name+".json")
	logFile, err := os.Create(filepath.Join(out, name+".log"))
	if err != nil {
		r.err = err
		return r
	}
	defer logFile.Close()
	fmt.Fprintf(os.Stderr, "mutate: %s, timeout coefficient %d (log %s)\n", pkg, coefficient, logFile.Name())
	// --exclude-files /: gremlins walks the package directory recursively,
	// and a file in a subdirectory belongs to another package with its own row.
	args := []string{"unleash",
		"--workers", fmt.Sprint(workers),
		"--timeout-coefficient", fmt.Sprint(coefficient),
		"--exclude-files", "/",
		"--output", jsonPath}
	if len(only) > 0 {
		// gremlins' regexps have no negation: every other file is excluded
		// by name.
		all, err := filepath.Glob(filepath.Join(pkg, "*.go"))
		if err != nil {
			r.err = err
			return r
		}
		for _, f := range all {
			if base := filepath.Base(f); !strings.HasSuffix(base, "_test.go") && !slices.Contains(only, base) {
				args = append(args, "--exclude-files", "^"+regexp.QuoteMeta(base)+"$")
			}
		}
		r.pkg += " (" + strings.Join(only, ", ") + ")"
	}
	cmd := exec.Command(gremlins, append(args, "./"+pkg)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	start := time.Now()
	_ = os.Remove(jsonPath)
	if err := cmd.Run(); err != nil {
		r.err = fmt.Errorf("gremlins: %w (see %s)", err, logFile.Name())
		return r
	}
	r.elapsed = time.Since(start)
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		r.err = err
		return r
	}
	var rep report
	if err := json.Unmarshal(raw, &rep); err != nil {
		r.err = fmt.Errorf("%s: %w", jsonPath, err)
		return r
	}
	for _, f := range rep.Files {
		for _, m := range f.Mutations {
			switch m.Status {
			case "KILLED":
				r.killed++
			case "LIVED":
				r.lived++
				r.survivors = append(r.survivors, mutant{pkg + "/" + f.Name, m.Line, m.Column, m.Type})
			case "TIMED OUT":
				r.timedOut++
			case "NOT COVERED":
				r.notCovered++
			default: // NOT VIABLE (does not compile), SKIPPED
				r.other++
			}
		}
	}
	slices.SortFunc(r.survivors, func(a, b mutant) int {
		return cmp.Or(cmp.Compare(a.file, b.file), cmp.Compare(a.line, b.line), cmp.Compare(a.column, b.column), cmp.Compare(a.kind, b.kind))
	})
	return r
}

func print(w io.Writer, rows []row) {
	fmt.Fprintln(w, "| package | killed | lived | timed out | not covered | not viable | kill rate (covered) | time |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		if r.err != nil {
			fmt.Fprintf(w, "| %s | error: %v | | | | | | |\n", r.pkg, r.err)
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d | %s | %s |\n", r.pkg, r.killed, r.lived, r.timedOut, r.notCovered, r.other, r.rate(), r.elapsed.Round(time.Second))
	}
	for _, r := range rows {
		if len(r.survivors) == 0 {
			continue
		}
		fmt.Fprintf(w, "\nLived in %s:\n", r.pkg)
		for _, m := range r.survivors {
			fmt.Fprintf(w, "  %s:%d:%d %s\n", m.file, m.line, m.column, m.kind)
		}
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "mutate:", err)
	os.Exit(1)
}
