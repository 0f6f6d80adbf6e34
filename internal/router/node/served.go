package node

// SetServedName makes name the model id clients see in /v1/models and
// must send as "model" (--served-model-name), in place of the file's name.
// Call it before building any role from m.
func (m *Model) SetServedName(name string) {
	if name == "" {
		return
	}
	m.Name = name
	m.Runtime = m.Runtime.WithName(name)
}
