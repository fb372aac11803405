package history

import (
	"encoding/json"
	"fmt"
	"os"
)

// file is the JSON form of a recorded history.
type file struct {
	Ops     []Op          `json:"ops"`
	Watches []WatchRecord `json:"watches,omitempty"`
}

// Save writes ops and watches to path as JSON, so that a history a soak found wrong (or could
// not decide) can be kept, read and checked again later with Load.
func Save(path string, ops []Op, watches []WatchRecord) error {
	b, err := json.Marshal(file{Ops: ops, Watches: watches})
	if err != nil {
		return fmt.Errorf("failed to encode the history: %w", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("failed to write the history: %w", err)
	}
	return nil
}

// Load reads a history Save wrote.
func Load(path string) ([]Op, []WatchRecord, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to read the history: %w", err)
	}
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, nil, fmt.Errorf("failed to decode the history %s: %w", path, err)
	}
	return f.Ops, f.Watches, nil
}
