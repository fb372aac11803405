package v1alpha1

// Annotations of the operator's membership bookkeeping, read by disaster recovery and cleared
// by a restore. controllers.IntentAnnotation and controllers.MemberIDAnnotation hold the same
// names.
const (
	// AnnotationMembershipIntent on the EtcdCluster holds the membership change in progress
	// (JSON). It is written before the first irreversible etcd call of a change and removed
	// when it ends.
	AnnotationMembershipIntent = "etcdpilot.io/membership-intent"
	// AnnotationMemberID on a member's volume claim (or, under emptyDir storage, on its pod)
	// names the etcd member whose data it holds, stamped once the member has run on it.
	AnnotationMemberID = "etcdpilot.io/member-id"
)
