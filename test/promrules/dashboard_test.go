package promrules

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID      int     `json:"id"`
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"` // a row's, when collapsed
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// grafanaVars are what Grafana's built-in variables stand for in a query, for parsing.
var grafanaVars = map[string]string{"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}

var variable = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)`)

// substitute puts a value in place of every $variable of a query: a regular expression's
// text for the dashboard's own (they are multi-valued and used with =~), a duration for
// Grafana's. It reports the variables that are neither.
func substitute(q string, own map[string]bool) (string, []string) {
	var unknown []string
	out := variable.ReplaceAllStringFunc(q, func(m string) string {
		sub := variable.FindStringSubmatch(m)
		name := sub[1] + sub[2]
		if v, ok := grafanaVars[name]; ok {
			return v
		}
		if own[name] {
			return "value-of-" + name
		}
		unknown = append(unknown, name)
		return m
	})
	return out, unknown
}

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// TestDashboards: each dashboard under docs/dashboards parses as JSON, has the variables
// namespace and cluster, and every query (panels', variables') parses as PromQL once its
// variables are substituted and names only known metrics.
func TestDashboards(t *testing.T) {
	files, err := filepath.Glob(repo + "/docs/dashboards/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no dashboard in docs/dashboards")
	}
	ours := operatorMetrics(t)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var d dashboard
			if err := json.Unmarshal(raw, &d); err != nil {
				t.Fatalf("not JSON: %v", err)
			}
			if d.Title == "" || d.UID == "" {
				t.Errorf("title %q, uid %q: both are needed", d.Title, d.UID)
			}
			own := map[string]bool{}
			for _, v := range d.Templating.List {
				own[v.Name] = true
			}
			for _, v := range []string{"namespace", "cluster"} {
				if !own[v] {
					t.Errorf("no variable %s", v)
				}
			}
			check := func(where, q string) {
				t.Helper()
				sub, unknown := substitute(q, own)
				if len(unknown) > 0 {
					t.Errorf("%s: unknown variables %v in %q", where, unknown, q)
				}
				expr, err := newParser().ParseExpr(sub)
				if err != nil {
					t.Errorf("%s: %q: %v", where, q, err)
					return
				}
				checkNames(t, where, expr, ours)
			}
			for _, v := range d.Templating.List {
				if v.Type != "query" {
					continue
				}
				var q struct {
					Query string `json:"query"`
				}
				if err := json.Unmarshal(v.Query, &q); err != nil {
					if err := json.Unmarshal(v.Query, &q.Query); err != nil {
						t.Errorf("variable %s: query %s", v.Name, v.Query)
						continue
					}
				}
				m := labelValues.FindStringSubmatch(q.Query)
				if m == nil {
					t.Errorf("variable %s: %q is not label_values(selector, label)", v.Name, q.Query)
					continue
				}
				check("variable "+v.Name, m[1])
			}
			ids := map[int]bool{}
			queries := 0
			var walk func(ps []panel)
			walk = func(ps []panel) {
				for _, p := range ps {
					if ids[p.ID] {
						t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
					}
					ids[p.ID] = true
					walk(p.Panels)
					if p.Type != "row" && len(p.Targets) == 0 {
						t.Errorf("panel %q has no query", p.Title)
					}
					for _, tg := range p.Targets {
						queries++
						check("panel "+p.Title, tg.Expr)
					}
				}
			}
			walk(d.Panels)
			if queries < 10 {
				t.Errorf("only %d queries", queries)
			}
		})
	}
}

// TestSubstitute: the dashboard's variables and Grafana's are replaced, others reported.
func TestSubstitute(t *testing.T) {
	got, unknown := substitute(`rate(x{namespace=~"$namespace", name=~"${cluster}"}[$__rate_interval]) and $other`, map[string]bool{"namespace": true, "cluster": true})
	if want := `rate(x{namespace=~"value-of-namespace", name=~"value-of-cluster"}[5m]) and $other`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if len(unknown) != 1 || unknown[0] != "other" {
		t.Errorf("unknown %v", unknown)
	}
}
