package observe

import (
	"context"
	"fmt"
	"reflect"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Pass is the cached client of one pass with its reads of the StatefulSet and of the member
// pods kept: the first Get of a StatefulSet and the first List of pods with given options are
// read from the cache, and every later one in the pass gets a copy of the same answer (the
// switches, the certificates, the pin of the claim templates and the observation each used to
// read them again). Reads of other kinds, and all writes, go to the client. A pass's own
// writes are not seen through it, as they are not through the manager's cache either, which
// lags them.
type Pass struct {
	client.Client
	mu    sync.Mutex
	kept  map[string]client.Object
	lists map[string]client.ObjectList
	gone  map[string]error
}

// NewPass returns the Pass over c for one pass.
func NewPass(c client.Client) *Pass {
	return &Pass{Client: c, kept: map[string]client.Object{}, lists: map[string]client.ObjectList{}, gone: map[string]error{}}
}

// Get implements client.Reader; a StatefulSet is read once per pass (its absence too).
func (p *Pass) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*appsv1.StatefulSet); !ok {
		return p.Client.Get(ctx, key, obj, opts...)
	}
	k := fmt.Sprintf("%T %s", obj, key)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err, ok := p.gone[k]; ok {
		return err
	}
	if o, ok := p.kept[k]; ok {
		reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(o.DeepCopyObject()).Elem())
		return nil
	}
	err := p.Client.Get(ctx, key, obj, opts...)
	switch {
	case apierrors.IsNotFound(err):
		p.gone[k] = err
	case err == nil:
		p.kept[k] = obj.DeepCopyObject().(client.Object)
	}
	return err
}

// List implements client.Reader; member pods are listed once per pass for given options.
func (p *Pass) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*corev1.PodList); !ok {
		return p.Client.List(ctx, list, opts...)
	}
	lo := &client.ListOptions{}
	lo.ApplyOptions(opts)
	k := fmt.Sprintf("%T %s %v %v %d %s", list, lo.Namespace, lo.LabelSelector, lo.FieldSelector, lo.Limit, lo.Continue)
	p.mu.Lock()
	defer p.mu.Unlock()
	if l, ok := p.lists[k]; ok {
		reflect.ValueOf(list).Elem().Set(reflect.ValueOf(l.DeepCopyObject()).Elem())
		return nil
	}
	if err := p.Client.List(ctx, list, opts...); err != nil {
		return err
	}
	p.lists[k] = list.DeepCopyObject().(client.ObjectList)
	return nil
}

type passKey struct{}

// WithPass returns ctx carrying the pass's reader p.
func WithPass(ctx context.Context, p *Pass) context.Context {
	return context.WithValue(ctx, passKey{}, p)
}

// PassOf is the pass's reader ctx carries, or c when it carries none.
func PassOf(ctx context.Context, c client.Client) client.Client {
	if p, ok := ctx.Value(passKey{}).(*Pass); ok {
		return p
	}
	return c
}
