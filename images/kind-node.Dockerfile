# The node image of stackbench's kind stacks: kind's own node image plus the CNI `bandwidth`
# plugin, which kind leaves out (its nodes carry host-local, loopback, ptp and portmap only).
# infra/kind_bandwidth.py chains it after kindnet's plugins, so that pods' kubernetes.io/
# ingress-bandwidth and egress-bandwidth annotations are enforced. Built from source at a
# pinned commit with the module's vendored dependencies, as kind builds its own plugins.
# infra/kind_bandwidth.py builds it (no context: `docker build -f - <this file`):
#   docker build -t stackbench-kind-node:v1.33.1 --build-arg NODE_IMAGE=kindest/node:v1.33.1 - \
#     < images/kind-node.Dockerfile
ARG NODE_IMAGE

# The Go release containernetworking/plugins v1.9.1 asks for (go.mod: go 1.24.2).
FROM golang:1.24.2-bookworm AS bandwidth
# containernetworking/plugins v1.9.1
ARG CNI_PLUGINS_COMMIT=adc3e6b5b581638afbd194cf2e9319ecbb0151a1
RUN git clone --filter=tree:0 https://github.com/containernetworking/plugins /src \
    && cd /src && git checkout "$CNI_PLUGINS_COMMIT" \
    && CGO_ENABLED=0 go build -mod=vendor -trimpath -o /bandwidth ./plugins/meta/bandwidth

FROM ${NODE_IMAGE}
COPY --from=bandwidth /bandwidth /opt/cni/bin/bandwidth
