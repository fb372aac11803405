// Package apply applies rendered objects with server-side apply under one field owner and
// prunes objects that a render no longer contains. It knows nothing about etcd.
package apply

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// HashAnnotation records a hash of the object as last applied. A changed render changes the
// hash, which makes fields the render dropped get removed by the next apply; a live object
// that drifted from the render is caught by comparing fields.
const HashAnnotation = "etcdpilot.io/applied-hash"

// Applier applies and prunes. Client should read from an informer cache (reads are then free)
// holding the kinds that are applied; Scheme must know those kinds.
type Applier struct {
	Client     client.Client
	Scheme     *runtime.Scheme
	FieldOwner string
	// Typed are the kinds read as typed objects (from Client's cache). Other kinds (a
	// platform team's chart may render any) are read as unstructured objects, which
	// controller-runtime's client reads from the API server. nil: every kind is typed.
	Typed map[schema.GroupKind]bool
}

// Result says what Apply did.
type Result struct {
	// Applied lists "Kind/name" of the objects that were sent to the API server.
	Applied []string
	// Unchanged counts objects that already matched and were not sent.
	Unchanged int
}

// Apply server-side applies each object that is missing or differs from its live copy, taking
// ownership of conflicting fields it sets (and only of those). Objects that already match are
// not sent, so an unchanged cluster costs no write. The objects get the hash annotation.
func (a *Applier) Apply(ctx context.Context, objs []*unstructured.Unstructured) (Result, error) {
	var res Result
	for _, desired := range objs {
		hash, err := Hash(desired)
		if err != nil {
			return res, err
		}
		ann := desired.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[HashAnnotation] = hash
		desired.SetAnnotations(ann)

		same, err := a.matches(ctx, desired, hash)
		if err != nil {
			return res, err
		}
		if same {
			res.Unchanged++
			continue
		}
		if err := a.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(desired),
			client.FieldOwner(a.FieldOwner), client.ForceOwnership); err != nil {
			return res, fmt.Errorf("failed to apply %s %s/%s: %w", desired.GetKind(), desired.GetNamespace(), desired.GetName(), err)
		}
		res.Applied = append(res.Applied, desired.GetKind()+"/"+desired.GetName())
	}
	return res, nil
}

// NotOwnedError is a rendered object whose name is taken by a live object that Apply did
// not apply for the same owner: another cluster's, one the owner's controller writes itself,
// or one a person created. Apply never takes such an object over.
type NotOwnedError struct {
	Kind, Namespace, Name string
	// Why says whose the live object is.
	Why string
}

func (e *NotOwnedError) Error() string {
	return fmt.Sprintf("the render holds %s %s/%s, but that name is taken by %s; rename the object in the chart (or the patch), or delete the live one if it is not needed", e.Kind, e.Namespace, e.Name, e.Why)
}

// owned returns a NotOwnedError when live exists and is not controlled by the owner that
// desired names (no owner named: nothing to compare, as in tests). Objects the owner's
// controller writes itself under the same owner are kept out of renders by name (the chart
// contract's reserved names), not here: a hand edit may drop the hash annotation.
func owned(desired *unstructured.Unstructured, live client.Object) error {
	want := metav1.GetControllerOfNoCopy(desired)
	if want == nil {
		return nil
	}
	notOwned := func(why string) error {
		return &NotOwnedError{Kind: desired.GetKind(), Namespace: desired.GetNamespace(), Name: desired.GetName(), Why: why}
	}
	got := metav1.GetControllerOfNoCopy(live)
	switch {
	case got == nil:
		return notOwned("an object no controller owns")
	case got.UID != want.UID:
		return notOwned(fmt.Sprintf("an object of %s %s", got.Kind, got.Name))
	}
	return nil
}

// matches reports whether the live object carries hash and holds every field of desired.
// A live object that Apply did not apply for desired's owner is a NotOwnedError.
func (a *Applier) matches(ctx context.Context, desired *unstructured.Unstructured, hash string) (bool, error) {
	live, err := a.newObject(desired.GroupVersionKind())
	if err != nil {
		return false, err
	}
	key := client.ObjectKeyFromObject(desired)
	if err := a.Client.Get(ctx, key, live); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("failed to get %s %s: %w", desired.GetKind(), key, err)
	}
	if err := owned(desired, live); err != nil {
		return false, err
	}
	if live.GetAnnotations()[HashAnnotation] != hash || live.GetDeletionTimestamp() != nil {
		return false, nil
	}
	liveMap, err := runtime.DefaultUnstructuredConverter.ToUnstructured(live)
	if err != nil {
		return false, fmt.Errorf("failed to convert %s %s: %w", desired.GetKind(), key, err)
	}
	return Contains(liveMap, desired.Object, nil), nil
}

func (a *Applier) newObject(gvk schema.GroupVersionKind) (client.Object, error) {
	if a.Typed != nil && !a.Typed[gvk.GroupKind()] {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		return u, nil
	}
	o, err := a.Scheme.New(gvk)
	if err != nil {
		return nil, fmt.Errorf("failed to create a %s: the rendered kind is not in the operator's scheme: %w", gvk, err)
	}
	co, ok := o.(client.Object)
	if !ok {
		return nil, fmt.Errorf("failed to create a %s: not an object", gvk)
	}
	return co, nil
}

// Hash returns a stable hash of obj without the hash annotation, and, for a StatefulSet,
// without its replicas: they are the operator's membership steps', which the apply carries
// only so that it never creates the StatefulSet with fewer (see the controller's
// pinReplicas). A scale is no change of the render: the hash, which tells whether the
// StatefulSet read is the one last applied, stays the same.
func Hash(obj *unstructured.Unstructured) (string, error) {
	c := obj.DeepCopy()
	if c.GetKind() == "StatefulSet" {
		unstructured.RemoveNestedField(c.Object, "spec", "replicas")
	}
	ann := c.GetAnnotations()
	delete(ann, HashAnnotation)
	if len(ann) == 0 {
		ann = nil
	}
	c.SetAnnotations(ann)
	b, err := json.Marshal(c.Object) // encoding/json sorts map keys
	if err != nil {
		return "", fmt.Errorf("failed to hash %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}

// PruneRequest selects the objects a prune may delete: objects of Kinds in Namespace that
// carry Selector and are controlled by the owner with OwnerUID, minus those in Keep.
type PruneRequest struct {
	Namespace string
	Selector  labels.Selector
	OwnerUID  types.UID
	Kinds     []schema.GroupVersionKind // list kinds are derived by appending "List"
	Keep      []*unstructured.Unstructured
}

// Prune deletes the objects selected by r and returns them as "Kind/name". An object that is
// not controlled by the owner, or of a kind beyond Typed that Apply did not apply (no hash
// annotation), is never deleted, whatever its labels say.
func (a *Applier) Prune(ctx context.Context, r PruneRequest) ([]string, error) {
	keep := map[string]bool{}
	for _, o := range r.Keep {
		keep[o.GroupVersionKind().GroupKind().String()+"/"+o.GetName()] = true
	}
	var deleted []string
	for _, gvk := range r.Kinds {
		objs, err := a.list(ctx, gvk, r.Namespace, r.Selector)
		if err != nil {
			return deleted, err
		}
		for _, o := range objs {
			// Of kinds beyond the typed ones, only what Apply applied (the hash annotation)
			// is pruned: the owner's controller writes objects of such kinds itself (a
			// ConfigMap, a Secret) under the same owner and labels.
			_, applied := o.GetAnnotations()[HashAnnotation]
			applied = applied || a.Typed == nil || a.Typed[gvk.GroupKind()]
			if keep[gvk.GroupKind().String()+"/"+o.GetName()] || !applied || !controlledBy(o, r.OwnerUID) || o.GetDeletionTimestamp() != nil {
				continue
			}
			uid := o.GetUID()
			err := a.Client.Delete(ctx, o, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
			if err != nil && !apierrors.IsNotFound(err) {
				return deleted, fmt.Errorf("failed to prune %s %s/%s: %w", gvk.Kind, o.GetNamespace(), o.GetName(), err)
			}
			deleted = append(deleted, gvk.Kind+"/"+o.GetName())
		}
	}
	sort.Strings(deleted)
	return deleted, nil
}

// List returns the objects of kind gvk in namespace that match selector.
func (a *Applier) list(ctx context.Context, gvk schema.GroupVersionKind, namespace string, selector labels.Selector) ([]client.Object, error) {
	if a.Typed != nil && !a.Typed[gvk.GroupKind()] {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := a.Client.List(ctx, list, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
			if meta.IsNoMatchError(err) {
				return nil, nil // the kind is gone from the cluster, and so are its objects
			}
			return nil, fmt.Errorf("failed to list %s in %s: %w", gvk.Kind, namespace, err)
		}
		out := make([]client.Object, 0, len(list.Items))
		for i := range list.Items {
			out = append(out, &list.Items[i])
		}
		return out, nil
	}
	lo, err := a.Scheme.New(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err != nil {
		return nil, fmt.Errorf("failed to list %s: not in the operator's scheme: %w", gvk.Kind, err)
	}
	list, ok := lo.(client.ObjectList)
	if !ok {
		return nil, fmt.Errorf("failed to list %s: not a list kind", gvk.Kind)
	}
	if err := a.Client.List(ctx, list, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return nil, fmt.Errorf("failed to list %s in %s: %w", gvk.Kind, namespace, err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, fmt.Errorf("failed to read %s list: %w", gvk.Kind, err)
	}
	out := make([]client.Object, 0, len(items))
	for _, it := range items {
		if o, ok := it.(client.Object); ok {
			out = append(out, o)
		}
	}
	return out, nil
}

func controlledBy(o client.Object, uid types.UID) bool {
	ref := metav1.GetControllerOfNoCopy(o)
	return ref != nil && ref.UID == uid
}

// Delete deletes the objects selected like Prune does, keeping none: the teardown of an owner
// whose objects must go even without a garbage collector. It returns how many objects are
// still there (being deleted or just deleted).
func (a *Applier) Delete(ctx context.Context, r PruneRequest) (int, error) {
	r.Keep = nil
	deleted, err := a.Prune(ctx, r)
	if err != nil {
		return 0, err
	}
	remaining := len(deleted)
	for _, gvk := range r.Kinds {
		objs, err := a.list(ctx, gvk, r.Namespace, r.Selector)
		if err != nil {
			return 0, err
		}
		for _, o := range objs {
			if controlledBy(o, r.OwnerUID) && o.GetDeletionTimestamp() != nil {
				remaining++
			}
		}
	}
	return remaining, nil
}
