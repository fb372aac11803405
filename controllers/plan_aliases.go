package controllers

import "github.com/etcd-pilot/etcd-pilot/internal/plan"

// The step type, the intent and the per-ordinal evidence live in internal/plan, shared by the
// planners here and the safety gate; these names keep the planners' code short.
type (
	podInfo          = plan.Pod
	membershipIntent = plan.Intent
	intentOp         = plan.IntentOp
	membershipAction = plan.Step
	actionKind       = plan.Kind
)

const (
	intentAdd     = plan.IntentAdd
	intentRemove  = plan.IntentRemove
	intentReplace = plan.IntentReplace

	actNone             = plan.None
	actWait             = plan.Wait
	actRecordIntent     = plan.RecordIntent
	actClearIntent      = plan.ClearIntent
	actAddLearner       = plan.AddLearner
	actPromoteLearner   = plan.PromoteLearner
	actMoveLeader       = plan.MoveLeader
	actRemoveMember     = plan.RemoveMember
	actScaleStatefulSet = plan.ScaleStatefulSet
	actDeletePVC        = plan.DeletePVC
	actDeletePod        = plan.DeletePod
	actAdvanceLog       = plan.AdvanceLog
)
