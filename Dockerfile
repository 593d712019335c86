# rally serve in a container: a static binary on a distroless base (no
# shell, no package manager, a non-root user).
#
#   docker build -t rally .
#   docker run --rm -p 8080:8080 -e RALLY_TOKEN_SECRET="$(openssl rand -hex 32)" rally
#
# In a container rally serve must listen on every interface (--addr
# :8080), which it does only with a token secret (or --insecure-no-auth).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X main.stampVersion=${VERSION} -X main.stampCommit=${COMMIT}" \
    -o /rally ./cmd/rally

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /rally /rally
EXPOSE 8080
ENTRYPOINT ["/rally"]
CMD ["serve", "--addr", ":8080"]
