package fakeplugin_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
)

// TestDescriptors: both variants serve every method the client knows,
// with the same streaming shape, and number their fields differently.
func TestDescriptors(t *testing.T) {
	streams := map[plugin.Method]bool{plugin.CollectorCollect: true, plugin.LogList: true, plugin.CostGetData: true}
	regs := map[fakeplugin.Variant]map[string]protoreflect.FieldNumber{}
	for _, v := range []fakeplugin.Variant{fakeplugin.Upstream, fakeplugin.Skewed} {
		reg, err := fakeplugin.Registry(v)
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		nums := map[string]protoreflect.FieldNumber{}
		regs[v] = nums
		for _, m := range plugin.Methods {
			svc, name, _ := strings.Cut(string(m), "/")
			d, err := reg.FindDescriptorByName(protoreflect.FullName(svc))
			if err != nil {
				t.Fatalf("%s: %s: %v", v, m, err)
			}
			md := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(name))
			if md == nil {
				t.Fatalf("%s: no method %s", v, m)
			}
			if md.IsStreamingServer() != streams[m] || md.IsStreamingClient() {
				t.Errorf("%s: %s streaming server %v", v, m, md.IsStreamingServer())
			}
			fs := md.Input().Fields()
			for i := range fs.Len() {
				nums[string(md.Input().FullName())+"."+string(fs.Get(i).Name())] = fs.Get(i).Number()
			}
		}
	}
	same := 0
	for k, n := range regs[fakeplugin.Upstream] {
		if regs[fakeplugin.Skewed][k] == n {
			same++
		}
	}
	if same != 0 {
		t.Errorf("%d request fields keep their number in the skewed variant", same)
	}
	if n := regs[fakeplugin.Upstream]["spaceone.api.notification.plugin.PluginDispatchRequest.notification_type"]; n != 3 {
		t.Errorf("upstream notification_type is field %d, want 3", n)
	}
}
