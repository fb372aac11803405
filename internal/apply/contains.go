package apply

import (
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/api/resource"
)

// quantityKeys are the map keys under which values are resource quantities, which the API
// server may print differently from the render ("0.5" becomes "500m").
var quantityKeys = map[string]bool{"requests": true, "limits": true, "sizeLimit": true, "storage": true}

// Contains reports whether live holds every field of desired with an equal value: the fields
// the API server defaulted or others added are ignored. Lists must have the same length and
// match element by element. Empty maps and lists in desired match missing fields.
func Contains(live, desired any, path []string) bool {
	switch d := desired.(type) {
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			return len(d) == 0 && live == nil
		}
		for k, dv := range d {
			lv, present := l[k]
			if !present {
				if isEmpty(dv) {
					continue
				}
				return false
			}
			if !Contains(lv, dv, append(path, k)) {
				return false
			}
		}
		return true
	case []any:
		l, ok := live.([]any)
		if !ok {
			return len(d) == 0 && live == nil
		}
		if len(l) != len(d) {
			return false
		}
		for i := range d {
			if !Contains(l[i], d[i], path) {
				return false
			}
		}
		return true
	case nil:
		return true
	default:
		return scalarEqual(live, desired, path)
	}
}

func isEmpty(v any) bool {
	switch t := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(t) == 0
	case []any:
		return len(t) == 0
	}
	return false
}

func scalarEqual(live, desired any, path []string) bool {
	if ln, ok := number(live); ok {
		if dn, ok := number(desired); ok {
			return ln == dn
		}
	}
	if reflect.DeepEqual(live, desired) {
		return true
	}
	ls, lok := live.(string)
	ds, dok := desired.(string)
	if lok && dok && underQuantity(path) {
		lq, err1 := resource.ParseQuantity(ls)
		dq, err2 := resource.ParseQuantity(ds)
		return err1 == nil && err2 == nil && lq.Cmp(dq) == 0
	}
	// The API server may turn a number written as a string into a number (or back) in
	// int-or-string fields such as targetPort.
	if lok != dok {
		return fmt.Sprint(live) == fmt.Sprint(desired)
	}
	return false
}

func underQuantity(path []string) bool {
	for _, p := range path {
		if quantityKeys[p] {
			return true
		}
	}
	return false
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case int64:
		return float64(n), true
	case float64:
		return n, true
	case float32:
		return float64(n), true
	}
	return 0, false
}
