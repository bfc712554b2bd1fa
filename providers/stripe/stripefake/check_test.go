package stripefake

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// checker is a tiny stand-in for testify's assert/require (go.sum lacks
// testify's transitive dependencies, and this package may not edit it).
type checker struct{ fatal bool }

var (
	assert  = checker{}
	require = checker{fatal: true}
)

func (c checker) fail(t testing.TB, msg string, extra []any) bool {
	t.Helper()
	if len(extra) > 0 {
		if f, ok := extra[0].(string); ok {
			msg += ": " + fmt.Sprintf(f, extra[1:]...)
		} else {
			msg += ": " + fmt.Sprint(extra...)
		}
	}
	if c.fatal {
		t.Fatal(msg)
	}
	t.Error(msg)
	return false
}

func isZero(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.IsZero()
}

func isEmpty(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Map, reflect.String, reflect.Array, reflect.Chan:
		return rv.Len() == 0
	case reflect.Pointer, reflect.Interface:
		return rv.IsNil()
	}
	return rv.IsZero()
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Slice, reflect.Map, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

func (c checker) Equal(t testing.TB, want, got any, extra ...any) bool {
	t.Helper()
	if w, ok := want.(time.Time); ok {
		if g, ok := got.(time.Time); ok && w.Equal(g) {
			return true
		}
	}
	if !reflect.DeepEqual(want, got) {
		return c.fail(t, fmt.Sprintf("not equal:\nwant %#v\ngot  %#v", want, got), extra)
	}
	return true
}

func (c checker) NoError(t testing.TB, err error, extra ...any) bool {
	t.Helper()
	if err != nil {
		return c.fail(t, "unexpected error: "+err.Error(), extra)
	}
	return true
}

func (c checker) True(t testing.TB, v bool, extra ...any) bool {
	t.Helper()
	if !v {
		return c.fail(t, "want true", extra)
	}
	return true
}

func (c checker) False(t testing.TB, v bool, extra ...any) bool {
	t.Helper()
	if v {
		return c.fail(t, "want false", extra)
	}
	return true
}

func (c checker) Len(t testing.TB, v any, n int, extra ...any) bool {
	t.Helper()
	if l := reflect.ValueOf(v).Len(); l != n {
		return c.fail(t, fmt.Sprintf("len %d, want %d", l, n), extra)
	}
	return true
}

func (c checker) Empty(t testing.TB, v any, extra ...any) bool {
	t.Helper()
	if !isEmpty(v) {
		return c.fail(t, fmt.Sprintf("want empty, got %v", v), extra)
	}
	return true
}

func (c checker) NotEmpty(t testing.TB, v any, extra ...any) bool {
	t.Helper()
	if isEmpty(v) {
		return c.fail(t, "want not empty", extra)
	}
	return true
}

func (c checker) Zero(t testing.TB, v any, extra ...any) bool {
	t.Helper()
	if !isZero(v) {
		return c.fail(t, fmt.Sprintf("want zero, got %v", v), extra)
	}
	return true
}

func (c checker) Nil(t testing.TB, v any, extra ...any) bool {
	t.Helper()
	if !isNil(v) {
		return c.fail(t, fmt.Sprintf("want nil, got %v", v), extra)
	}
	return true
}

func (c checker) NotNil(t testing.TB, v any, extra ...any) bool {
	t.Helper()
	if isNil(v) {
		return c.fail(t, "want not nil", extra)
	}
	return true
}

func contains(container, elem any) bool {
	if s, ok := container.(string); ok {
		return strings.Contains(s, fmt.Sprint(elem))
	}
	rv := reflect.ValueOf(container)
	switch rv.Kind() {
	case reflect.Map:
		return rv.MapIndex(reflect.ValueOf(elem)).IsValid()
	case reflect.Slice, reflect.Array:
		for i := 0; i < rv.Len(); i++ {
			if reflect.DeepEqual(rv.Index(i).Interface(), elem) {
				return true
			}
		}
	}
	return false
}

func (c checker) Contains(t testing.TB, container, elem any, extra ...any) bool {
	t.Helper()
	if !contains(container, elem) {
		return c.fail(t, fmt.Sprintf("%v does not contain %v", container, elem), extra)
	}
	return true
}

func (c checker) NotContains(t testing.TB, container, elem any, extra ...any) bool {
	t.Helper()
	if contains(container, elem) {
		return c.fail(t, fmt.Sprintf("%v contains %v", container, elem), extra)
	}
	return true
}

func toFloat(v any) float64 {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(rv.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return float64(rv.Uint())
	case reflect.Float32, reflect.Float64:
		return rv.Float()
	}
	panic(fmt.Sprintf("not a number: %T", v))
}

func (c checker) Positive(t testing.TB, v any, extra ...any) bool {
	t.Helper()
	if toFloat(v) <= 0 {
		return c.fail(t, fmt.Sprintf("want positive, got %v", v), extra)
	}
	return true
}

func (c checker) Less(t testing.TB, a, b any, extra ...any) bool {
	t.Helper()
	if !(toFloat(a) < toFloat(b)) {
		return c.fail(t, fmt.Sprintf("want %v < %v", a, b), extra)
	}
	return true
}

func (c checker) LessOrEqual(t testing.TB, a, b any, extra ...any) bool {
	t.Helper()
	if !(toFloat(a) <= toFloat(b)) {
		return c.fail(t, fmt.Sprintf("want %v <= %v", a, b), extra)
	}
	return true
}

func (c checker) GreaterOrEqual(t testing.TB, a, b any, extra ...any) bool {
	t.Helper()
	if !(toFloat(a) >= toFloat(b)) {
		return c.fail(t, fmt.Sprintf("want %v >= %v", a, b), extra)
	}
	return true
}

func (c checker) ErrorAs(t testing.TB, err error, target any, extra ...any) bool {
	t.Helper()
	if !errors.As(err, target) {
		return c.fail(t, fmt.Sprintf("error %v is not %T", err, target), extra)
	}
	return true
}

func (c checker) JSONEq(t testing.TB, want, got string, extra ...any) bool {
	t.Helper()
	var w, g any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		return c.fail(t, "bad want JSON: "+err.Error(), extra)
	}
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		return c.fail(t, "bad got JSON: "+err.Error(), extra)
	}
	return c.Equal(t, w, g, extra...)
}
