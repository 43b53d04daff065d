#ifndef CNICE_SHIM_H
#define CNICE_SHIM_H

#include <nice/agent.h>
#include <stun/usages/bind.h>
#include <glib.h>
#include <glib-object.h>
#include <gio/gio.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The selected pair's socket descriptor with the kernel's receive stamps turned on, or -1 (no
   pair, or a relayed one: libnice gives no socket for TURN). The first SIOCGSTAMPNS turns them
   on (it answers ENOENT); SO_TIMESTAMPNS would not do: with it the stamp goes to a control
   message libnice does not read, and the socket's last stamp is no longer kept. */
static inline int cnice_selected_socket_timestamped(NiceAgent *agent, guint stream_id) {
    GSocket *socket = nice_agent_get_selected_socket(agent, stream_id, 1);
    if (socket == NULL) return -1;
    int fd = g_socket_get_fd(socket);
    g_object_unref(socket);
    if (fd < 0) return -1;
    struct timespec stamp;
    (void)ioctl(fd, SIOCGSTAMPNS, &stamp);
    return fd;
}

/* How long ago (ns) the datagram last read from `fd` reached this host, by the kernel's stamp;
   -1 if the socket has none. */
static inline long long cnice_last_datagram_age_ns(int fd) {
    struct timespec stamp, now;
    if (ioctl(fd, SIOCGSTAMPNS, &stamp) != 0) return -1;
    clock_gettime(CLOCK_REALTIME, &now);
    return (long long)(now.tv_sec - stamp.tv_sec) * 1000000000LL + (now.tv_nsec - stamp.tv_nsec);
}

/* Signal callback shapes, one per libnice signal CallNode listens to. */
/* The process's socket watcher (SocketWatcher.swift): epoll with a 64-bit token per socket
 * (struct epoll_event is packed on x86-64, so Swift never handles it). */
static inline int cnice_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }
static inline int cnice_epoll_add(int epoll, int fd, unsigned long long token) {
    struct epoll_event event = {0};
    event.events = EPOLLIN;
    event.data.u64 = token;
    return epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event);
}
static inline int cnice_epoll_remove(int epoll, int fd) { return epoll_ctl(epoll, EPOLL_CTL_DEL, fd, NULL); }
/* Waits until a socket is readable; writes up to `max` (at most 64) tokens and returns how many,
 * or -1 with errno set. */
static inline int cnice_epoll_wait(int epoll, unsigned long long *tokens, int max) {
    struct epoll_event events[64];
    if (max > 64) max = 64;
    int ready = epoll_wait(epoll, events, max, -1);
    for (int i = 0; i < ready; i++) tokens[i] = events[i].data.u64;
    return ready;
}
/* The calling thread's kernel id. */
static inline int cnice_thread_id(void) { return (int)syscall(SYS_gettid); }

typedef void (*cnice_state_changed_cb)(NiceAgent *agent, guint stream_id, guint component_id,
                                       guint state, gpointer user_data);
typedef void (*cnice_new_candidate_cb)(NiceAgent *agent, NiceCandidate *candidate,
                                       gpointer user_data);
typedef void (*cnice_gathering_done_cb)(NiceAgent *agent, guint stream_id, gpointer user_data);
typedef void (*cnice_selected_pair_cb)(NiceAgent *agent, guint stream_id, guint component_id,
                                       NiceCandidate *local, NiceCandidate *remote,
                                       gpointer user_data);

/* g_signal_connect and G_CALLBACK are macros: one typed helper per signal. */
static inline gulong cnice_connect_state_changed(NiceAgent *agent, cnice_state_changed_cb cb,
                                                 gpointer data) {
    return g_signal_connect(agent, "component-state-changed", G_CALLBACK(cb), data);
}
static inline gulong cnice_connect_new_candidate(NiceAgent *agent, cnice_new_candidate_cb cb,
                                                 gpointer data) {
    return g_signal_connect(agent, "new-candidate-full", G_CALLBACK(cb), data);
}
static inline gulong cnice_connect_gathering_done(NiceAgent *agent, cnice_gathering_done_cb cb,
                                                  gpointer data) {
    return g_signal_connect(agent, "candidate-gathering-done", G_CALLBACK(cb), data);
}
static inline gulong cnice_connect_selected_pair(NiceAgent *agent, cnice_selected_pair_cb cb,
                                                 gpointer data) {
    return g_signal_connect(agent, "new-selected-pair-full", G_CALLBACK(cb), data);
}
/* g_signal_handlers_disconnect_by_data is a macro. */
static inline guint cnice_disconnect_all(NiceAgent *agent, gpointer data) {
    return g_signal_handlers_disconnect_matched(agent, G_SIGNAL_MATCH_DATA, 0, 0, NULL, NULL, data);
}

/* g_object_set is variadic. */
static inline void cnice_set_bool(NiceAgent *agent, const char *name, gboolean value) {
    g_object_set(agent, name, value, NULL);
}
static inline void cnice_set_uint(NiceAgent *agent, const char *name, guint value) {
    g_object_set(agent, name, value, NULL);
}
static inline void cnice_set_string(NiceAgent *agent, const char *name, const char *value) {
    g_object_set(agent, name, value, NULL);
}
static inline gboolean cnice_get_bool(NiceAgent *agent, const char *name) {
    gboolean value = FALSE;
    g_object_get(agent, name, &value, NULL);
    return value;
}
static inline guint cnice_get_uint(NiceAgent *agent, const char *name) {
    guint value = 0;
    g_object_get(agent, name, &value, NULL);
    return value;
}

/* The foundation is a fixed-size char array, awkward to reach from Swift. */
static inline const char *cnice_candidate_foundation(const NiceCandidate *candidate) {
    return candidate->foundation;
}
static inline void cnice_candidate_set_foundation(NiceCandidate *candidate, const char *foundation) {
    g_strlcpy(candidate->foundation, foundation, NICE_CANDIDATE_MAX_FOUNDATION);
}

/* GSList building without exposing GLib list macros to Swift callers. */
static inline GSList *cnice_slist_append(GSList *list, gpointer data) {
    return g_slist_append(list, data);
}
static inline void cnice_candidate_list_free(GSList *list) {
    g_slist_free_full(list, (GDestroyNotify)nice_candidate_free);
}

static inline gint cnice_priority_default(void) { return G_PRIORITY_DEFAULT; }

/* MARK: STUN Binding without ICE (RFC 5389, libnice's stun/usages/bind.h) */

/* A STUN agent for Binding requests and indications from one socket; it remembers the
   transactions it sent, so an answer is taken only for one of them. */
typedef struct { StunAgent agent; } cnice_stun_binding;

static inline cnice_stun_binding *cnice_stun_binding_new(void) {
    cnice_stun_binding *binding = g_new0(cnice_stun_binding, 1);
    stun_agent_init(&binding->agent, STUN_ALL_KNOWN_ATTRIBUTES, STUN_COMPATIBILITY_RFC5389, 0);
    return binding;
}

static inline void cnice_stun_binding_free(cnice_stun_binding *binding) { g_free(binding); }

/* A Binding request in `buffer`; its length (0: not made). */
static inline size_t cnice_stun_binding_request(cnice_stun_binding *binding, uint8_t *buffer, size_t size) {
    StunMessage message;
    return stun_usage_bind_create(&binding->agent, &message, buffer, size);
}

/* A Binding Indication (no answer expected) in `buffer`; its length (0: not made). */
static inline size_t cnice_stun_binding_indication(cnice_stun_binding *binding, uint8_t *buffer, size_t size) {
    StunMessage message;
    return stun_usage_bind_keepalive(&binding->agent, &message, buffer, size);
}

/* 1 when `bytes` is a success response to a request this agent made, with the address it
   says the request came from (XOR-MAPPED-ADDRESS, else MAPPED-ADDRESS) in `mapped`; else 0. */
static inline int cnice_stun_binding_mapped(cnice_stun_binding *binding, const uint8_t *bytes, size_t length,
                                            struct sockaddr_storage *mapped, socklen_t *mapped_length) {
    StunMessage message;
    if (stun_agent_validate(&binding->agent, &message, bytes, length, NULL, NULL) != STUN_VALIDATION_SUCCESS) return 0;
    struct sockaddr_storage alternate;
    socklen_t alternate_length = sizeof alternate;
    *mapped_length = sizeof *mapped;
    return stun_usage_bind_process(&message, (struct sockaddr *)mapped, mapped_length,
                                   (struct sockaddr *)&alternate, &alternate_length) == STUN_USAGE_BIND_RETURN_SUCCESS;
}

#endif
