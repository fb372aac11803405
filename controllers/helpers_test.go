package controllers_test

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func ptrIntStr(i int) *intstr.IntOrString {
	v := intstr.FromInt32(int32(i))
	return &v
}
