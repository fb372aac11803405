package apply

import "testing"

func TestContains(t *testing.T) {
	live := map[string]any{
		"metadata": map[string]any{"name": "x", "labels": map[string]any{"a": "1", "b": "2"}, "uid": "u"},
		"spec": map[string]any{
			"replicas":   int64(3),
			"ports":      []any{map[string]any{"name": "client", "port": int64(2379), "protocol": "TCP", "targetPort": "client"}},
			"resources":  map[string]any{"requests": map[string]any{"cpu": "500m", "memory": "1Gi"}},
			"targetPort": int64(8080),
		},
	}
	tests := []struct {
		name    string
		desired map[string]any
		want    bool
	}{
		{"subset", map[string]any{"metadata": map[string]any{"labels": map[string]any{"a": "1"}}}, true},
		{"defaulted fields are ignored", map[string]any{"spec": map[string]any{"ports": []any{map[string]any{"name": "client", "port": float64(2379)}}}}, true},
		{"changed value", map[string]any{"spec": map[string]any{"replicas": int64(5)}}, false},
		{"missing key", map[string]any{"metadata": map[string]any{"labels": map[string]any{"c": "3"}}}, false},
		{"list length differs", map[string]any{"spec": map[string]any{"ports": []any{map[string]any{"name": "client"}, map[string]any{"name": "peer"}}}}, false},
		{"list element differs", map[string]any{"spec": map[string]any{"ports": []any{map[string]any{"name": "peer"}}}}, false},
		{"equal quantities written differently", map[string]any{"spec": map[string]any{"resources": map[string]any{"requests": map[string]any{"cpu": "0.5", "memory": "1024Mi"}}}}, true},
		{"different quantities", map[string]any{"spec": map[string]any{"resources": map[string]any{"requests": map[string]any{"cpu": "1"}}}}, false},
		{"quantity forms only count under quantity keys", map[string]any{"metadata": map[string]any{"labels": map[string]any{"a": "1.0"}}}, false},
		{"int-or-string written as a string", map[string]any{"spec": map[string]any{"targetPort": "8080"}}, true},
		{"empty map matches missing", map[string]any{"metadata": map[string]any{"annotations": map[string]any{}}}, true},
		{"empty list matches missing", map[string]any{"spec": map[string]any{"tolerations": []any{}}}, true},
		{"non-empty map vs missing", map[string]any{"metadata": map[string]any{"annotations": map[string]any{"k": "v"}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Contains(live, tt.desired, nil); got != tt.want {
				t.Fatalf("Contains = %v, want %v", got, tt.want)
			}
		})
	}
}
