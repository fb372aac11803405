package maintenance

import "github.com/etcd-pilot/etcd-pilot/internal/plan"

// Asked reports whether the maintenance planner is asked over a, the step the planners above
// it decided: when they have nothing to do (None) or only wait; while a recorded
// defragmentation stands (defragmenting), whatever a is.
func Asked(a plan.Step, defragmenting bool) bool {
	return a.Kind == plan.None || a.Kind == plan.Wait || defragmenting
}

// Over returns the step a pass takes when the planner (Decide, on o) is asked over a. While a
// recorded defragmentation stands (o.Defragmentation), the planner's AdvanceLog (the entries
// that let the member's applied index show whether it is done) goes first, whatever a is:
// until the record ends, the safety gate refuses every step that takes another voter down.
// Otherwise a step of the planners above stands, and the planner's own step replaces a None,
// or a Wait when etcd lists an alarm.
func Over(a plan.Step, o Observation) plan.Step {
	m := Decide(o)
	switch {
	case o.Defragmentation != nil && m.Kind == plan.AdvanceLog:
		return m
	case a.Kind != plan.None && a.Kind != plan.Wait:
		return a
	case m.Kind == plan.None || (a.Kind == plan.Wait && len(o.Alarms) == 0):
		return a
	}
	return m
}
