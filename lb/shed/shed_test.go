package shed

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/spillway-lb/spillway/lb/waterfall"
)

func TestFraction(t *testing.T) {
	headroom := DefaultConfig()
	headroom.Admit = 0.9
	uncapped := DefaultConfig()
	uncapped.MaxFraction = 1
	tests := []struct {
		name             string
		cfg              Config
		demand, capacity float64
		want             float64
	}{
		{"20% over: a sixth refused", DefaultConfig(), 120, 100, 1 - 100.0/120},
		{"70% over", DefaultConfig(), 170, 100, 1 - 100.0/170},
		{"3× over: capped at MaxFraction", DefaultConfig(), 300, 100, 0.5},
		{"3× over, MaxFraction 1", uncapped, 300, 100, 1 - 100.0/300},
		{"at capacity", DefaultConfig(), 100, 100, 0},
		{"below capacity", DefaultConfig(), 50, 100, 0},
		{"0.5% over: noise, nothing", DefaultConfig(), 100.5, 100, 0},
		{"headroom 0.9 at capacity", headroom, 100, 100, 0.1},
		{"no demand", DefaultConfig(), 0, 100, 0},
		{"no capacity", DefaultConfig(), 100, 0, 0},
		{"NaN demand", DefaultConfig(), math.NaN(), 100, 0},
		{"infinite demand", DefaultConfig(), math.Inf(1), 100, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.cfg.Fraction(tt.demand, tt.capacity); math.Abs(got-tt.want) > 1e-12 {
				t.Errorf("Fraction(%v, %v) = %v, want %v", tt.demand, tt.capacity, got, tt.want)
			}
		})
	}
}

// TestFromPlanUniform: a world 20% over its capacity, demand skewed to
// the region with least capacity. The plan runs every region at λ = 1.2
// (rule 6); refusing FromPlan's fraction at every site leaves each region
// with exactly its capacity and each site with the same share admitted.
func TestFromPlanUniform(t *testing.T) {
	rtt := func(a, b, c float64) map[string]float64 { return map[string]float64{"a": a, "b": b, "c": c} }
	w := waterfall.World{
		Regions: []waterfall.Region{
			{Name: "a", Groups: []waterfall.Group{{Name: "a1", Instances: 3, Healthy: 3, Capacity: 30}}},
			{Name: "b", Groups: []waterfall.Group{{Name: "b1", Instances: 5, Healthy: 5, Capacity: 50}}},
			{Name: "c", Groups: []waterfall.Group{{Name: "c1", Instances: 10, Healthy: 10, Capacity: 100}}},
		},
		Sites: []waterfall.Site{
			{Name: "near-a", Demand: 130, RTT: rtt(5, 80, 150)},
			{Name: "near-b", Demand: 50, RTT: rtt(80, 5, 90)},
			{Name: "near-c", Demand: 36, RTT: rtt(150, 90, 5)},
		},
	}
	plan, err := waterfall.Compute(w, waterfall.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(plan.Lambda-1.2) > 1e-12 {
		t.Fatalf("plan λ = %v, want 1.2 (216 over 180)", plan.Lambda)
	}
	r := DefaultConfig().FromPlan(plan)
	if want := 1 - 1/1.2; math.Abs(r.Fraction()-want) > 1e-12 {
		t.Fatalf("FromPlan fraction = %v, want %v", r.Fraction(), want)
	}
	admitted := 1 - r.Fraction()
	for _, reg := range plan.Regions {
		if got := reg.Load * admitted; math.Abs(got-reg.Capacity) > 1e-9 {
			t.Errorf("region %s: admitted load %v, want its capacity %v", reg.Name, got, reg.Capacity)
		}
	}
	if r := DefaultConfig().FromPlan(nil); r.Fraction() != 0 {
		t.Errorf("FromPlan(nil) = %v, want 0", r.Fraction())
	}
}

// TestFromPlanBelowOverload: with Admit below 1, a plan out of overload
// (λ = 1 whatever its demand) refuses only down to Admit × capacity: nothing
// at half the capacity, 1 − 0.9/0.95 at 95% of it; in overload 1 − Admit/λ
// as before. Without the demand over capacity below λ = 1 the rule would
// refuse 1 − Admit (10%) of every arrival at any load.
func TestFromPlanBelowOverload(t *testing.T) {
	rtt := map[string]float64{"a": 5, "b": 50}
	for _, tt := range []struct {
		name   string
		demand float64 // of 200 in all
		want   float64
	}{
		{"idle", 0, 0},
		{"half", 100, 0},
		{"at 0.9", 180, 0},
		{"at 0.95", 190, 1 - 0.9/0.95},
		{"at capacity", 200, 1 - 0.9},
		{"overload 1.2", 240, 1 - 0.9/1.2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := waterfall.World{
				Regions: []waterfall.Region{
					{Name: "a", Groups: []waterfall.Group{{Name: "a1", Instances: 1, Healthy: 1, Capacity: 100}}},
					{Name: "b", Groups: []waterfall.Group{{Name: "b1", Instances: 1, Healthy: 1, Capacity: 100}}},
				},
				Sites: []waterfall.Site{{Name: "s", Demand: tt.demand, RTT: rtt}, {Name: "t", Demand: 0, RTT: rtt}},
			}
			plan, err := waterfall.Compute(w, waterfall.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			cfg := DefaultConfig()
			cfg.Admit = 0.9
			if got := cfg.FromPlan(plan).Fraction(); math.Abs(got-tt.want) > 1e-12 {
				t.Errorf("demand %v of 200, admit 0.9: FromPlan fraction = %v, want %v (λ %v)", tt.demand, got, tt.want, plan.Lambda)
			}
			if got := DefaultConfig().FromPlan(plan).Fraction(); tt.demand <= 200 && got != 0 {
				t.Errorf("demand %v of 200, admit 1: FromPlan fraction = %v, want 0", tt.demand, got)
			}
		})
	}
}

func TestRuleAdmit(t *testing.T) {
	q := NewRule(0.25)
	if q.Admit(1<<62 - 1) {
		t.Error("NewRule(0.25).Admit(2^62 − 1) = true, want refused")
	}
	if !q.Admit(1 << 62) {
		t.Error("NewRule(0.25).Admit(2^62) = false, want admitted")
	}
	if !(Rule{}).Admit(0) || !NewRule(math.NaN()).Admit(0) || !NewRule(-1).Admit(0) {
		t.Error("a zero, NaN or negative Rule refused rnd = 0")
	}
	if NewRule(1).Admit(math.MaxUint64) || NewRule(2).Admit(math.MaxUint64) {
		t.Error("NewRule(1) admitted rnd = MaxUint64")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	r := NewRule(1 - 100.0/120)
	refused := 0
	const n = 200000
	for range n {
		if !r.Admit(rng.Uint64()) {
			refused++
		}
	}
	if got := float64(refused) / n; math.Abs(got-r.Fraction()) > 0.003 {
		t.Errorf("refused %.4f of arrivals, want %.4f", got, r.Fraction())
	}
	if a := testing.AllocsPerRun(100, func() { r.Admit(rng.Uint64()) }); a != 0 {
		t.Errorf("Admit allocates %v", a)
	}
}

func TestConfigValidate(t *testing.T) {
	err := Config{Admit: 0, MinFraction: 1, MaxFraction: 1.5}.Validate()
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "admit:") || !strings.Contains(err.Error(), "min_fraction:") || !strings.Contains(err.Error(), "max_fraction:") {
		t.Errorf("Validate = %v, want the three fields named", err)
	}
	err = ThrottleConfig{K: 0.5, Window: 0, Bucket: 0}.Validate()
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "k:") || !strings.Contains(err.Error(), "bucket:") {
		t.Errorf("ThrottleConfig.Validate = %v, want k and bucket named", err)
	}
	if err := (ThrottleConfig{K: 2, Window: 500, Bucket: 1000}).Validate(); err == nil || !strings.Contains(err.Error(), "window:") {
		t.Errorf("a window shorter than a bucket: Validate = %v, want window named", err)
	}
}
