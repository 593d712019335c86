// rally client: the browser and Node client of `rally serve`'s /ws
// protocol, as one dependency-free ES module (docs/CLIENT-JS.md).
//
// It keeps one WebSocket open for as long as the page wants it: it
// reconnects with exponential backoff and full jitter up to a cap, waits
// for the browser to be back online, refreshes the token through a
// callback, subscribes again to every topic with the last position it saw,
// and says per topic whether what was missed was recovered.
//
//   import { Client } from "/client.js";
//   const client = new Client("/ws", { getToken: async () => (await fetch("/token")).text() });
//   const chat = client.subscribe("chat.lobby");
//   chat.on("message", (m) => console.log(m.data, m.position));
//   chat.on("subscribed", (s) => s.recovered || reloadFromDatabase());
//   client.connect();
//
// Node 22 and later have a WebSocket global. On Node 20, pass one:
// `new Client(url, { WebSocket: (await import("ws")).WebSocket })`.

/** @typedef {{offset: number, epoch: string}} Position where a message sits in its topic's history */

/**
 * The events, by name (docs/CLIENT-JS.md has the table).
 * @typedef {{attempt: number, delay: number, code: number, reason: string}} ConnectingEvent
 * @typedef {{attempt: number}} ConnectedEvent
 * @typedef {{code: number, reason: string, reconnect: boolean}} DisconnectedEvent
 * @typedef {{topic: string, recovering: boolean, recovered: boolean, reason: string, resubscribed: boolean,
 *   replayed: number, position: Position | null, client?: string}} SubscribedEvent
 * @typedef {{topic: string, data: any, position: Position | null, encoding: string}} TopicMessage
 * @typedef {{type: "join" | "leave", topic: string, client: string, user: string}} PresenceChange
 * @typedef {{code: string, message: string, topic: string}} ClientError
 * @typedef {{topic: string}} UnsubscribedEvent
 * @typedef {{subscribed: SubscribedEvent, message: TopicMessage, presence: PresenceChange,
 *   error: ClientError, unsubscribed: UnsubscribedEvent}} SubscriptionEvents
 * @typedef {SubscriptionEvents & {connecting: ConnectingEvent, connected: ConnectedEvent,
 *   disconnected: DisconnectedEvent}} ClientEvents
 */

/**
 * RallyError is what failed requests reject with and what "error" events
 * carry: code is the protocol's error code (docs/PROTOCOL.md) or one of the
 * client's own: "disconnected" (the connection ended before the answer),
 * "not_connected" (nothing was sent), "token" (getToken failed), "url"
 * (the WebSocket constructor refused the URL).
 */
export class RallyError extends Error {
  /** @param {string} code @param {string} message */
  constructor(code, message) {
    super(message);
    this.name = "RallyError";
    this.code = code;
  }
}

// emit is Emitter's method that calls the handlers; a symbol keeps it off
// the public API.
const emit = Symbol("emit");

/**
 * Emitter is the small on/off/once event API of Client and Subscription.
 * @template {object} E the events: name to event object
 */
class Emitter {
  #handlers = new Map();

  /**
   * on calls fn(event) for every event of this type; it returns a function that stops it.
   * @template {keyof E & string} K
   * @param {K} type
   * @param {(ev: E[K]) => void} fn
   * @returns {() => void}
   */
  on(type, fn) {
    let set = this.#handlers.get(type);
    if (!set) this.#handlers.set(type, (set = new Set()));
    set.add(fn);
    return () => this.off(type, fn);
  }

  /**
   * off stops fn from being called for this type.
   * @template {keyof E & string} K
   * @param {K} type
   * @param {(ev: E[K]) => void} fn
   */
  off(type, fn) {
    this.#handlers.get(type)?.delete(fn);
  }

  /**
   * once resolves with the next event of this type.
   * @template {keyof E & string} K
   * @param {K} type
   * @returns {Promise<E[K]>}
   */
  once(type) {
    return new Promise((resolve) => {
      const stop = this.on(type, (ev) => {
        stop();
        resolve(ev);
      });
    });
  }

  // emit calls the handlers in the order they were added. A handler that
  // throws does not stop the others or the client: the exception is
  // rethrown on its own, as an EventTarget does.
  [emit](type, ev) {
    const set = this.#handlers.get(type);
    if (!set) return;
    for (const fn of [...set]) {
      try {
        fn(ev);
      } catch (err) {
        setTimeout(() => {
          throw err;
        });
      }
    }
  }
}

/**
 * Subscription is one topic of a Client. Its events: "subscribed",
 * "message", "presence", "error", "unsubscribed" (the same objects as the
 * Client's events of those names, for this topic only).
 * @extends {Emitter<SubscriptionEvents>}
 */
export class Subscription extends Emitter {
  #client;

  constructor(client, topic, since) {
    super();
    this.#client = client;
    /** topic is the topic's name. */
    this.topic = topic;
    /**
     * position is the position of the last message delivered (or the
     * position given to subscribe, or the one the server reported when
     * subscribing): what the next subscribe asks to resume from. null
     * when the topic has no history on the server.
     * @type {Position | null}
     */
    this.position = since ?? null;
    /** state is "pending" (not acknowledged on this connection), "subscribed", or "unsubscribed". */
    this.state = "pending";
  }

  /** unsubscribe stops the topic's messages; the subscription is then over. */
  unsubscribe() {
    this.#client.unsubscribe(this.topic);
  }
}

/** @typedef {"disconnected" | "connecting" | "connected" | "closed"} State */

/**
 * Client is one connection to `rally serve`'s /ws, kept open until close.
 *
 * Events (on(type, fn)):
 * - "connecting" {attempt, delay, code, reason}: an attempt will start in
 *   delay ms; attempt counts the tries since the last connection (1 after a
 *   drop; 0 for the first connect); code and reason say how the previous
 *   connection or try ended (0 and "" for the first).
 * - "connected" {attempt}: the WebSocket is open (attempt: the try that
 *   made it, as in its "connecting" event); subscribes are on their way.
 * - "disconnected" {code, reason, reconnect}: an open connection ended (or
 *   the browser went offline, or close was called); reconnect says whether
 *   the client will try again.
 * - "subscribed" {topic, recovering, recovered, reason, resubscribed,
 *   replayed, position, client}: the server acknowledged a subscribe.
 *   recovering: a position was sent. recovered: every message after it
 *   follows (replayed of them), in order, before any newer one; false with
 *   reason when the server could not prove that, or nothing was asked.
 *   resubscribed: the topic was subscribed on an earlier connection.
 *   client: this connection's member id on presence topics.
 * - "message" {topic, data, position, encoding}: a message on a topic;
 *   position is null on topics without history.
 * - "unsubscribed" {topic}: after unsubscribe.
 * - "presence" {topic, ...}: a join or leave on a topic with presence.
 * - "error" {code, message, topic}: something the server refused, or a
 *   token the callback could not give.
 *
 * Methods are safe to call in any state.
 * @extends {Emitter<ClientEvents>}
 */
export class Client extends Emitter {
  #url;
  #opts;
  #WebSocket;
  #ws = null;
  #token = "";
  #tokenStale = false; // ask getToken before the next attempt
  #attempt = 0;
  #timer = null;
  #try = 0; // numbers the scheduled tries: a try that is no longer the latest gives up
  #handshakeTimer = null;
  #nextID = 1;
  #pending = new Map(); // request id -> {resolve, reject, topic}
  #subs = new Map(); // topic -> Subscription
  #acked = new WeakSet(); // subscriptions the server acknowledged once
  #lastClose = { code: 0, reason: "" };
  #offline = false;
  #listening = false;

  /**
   * @param {string} url the /ws endpoint: ws:, wss:, http:, https:, or a
   *   path relative to the page ("/ws") in a browser
   * @param {object} [options]
   * @param {string} [options.token] the JWT to connect with (sent as ?token=)
   * @param {() => Promise<string> | string} [options.getToken] gives a
   *   fresh token: called before connecting without one, and before a
   *   reconnect once the token has expired (its exp claim), the server
   *   closed the connection for it, or the last try failed before opening
   *   (which is how a refused handshake looks to a browser)
   * @param {number} [options.minDelay=500] the backoff's first cap, ms
   * @param {number} [options.maxDelay=20000] the backoff's cap, ms
   * @param {number} [options.timeout=10000] how long a handshake may take, ms
   * @param {typeof WebSocket} [options.WebSocket] the WebSocket constructor
   *   (default: the global one; on Node 20 pass npm ws's)
   */
  constructor(url, options = {}) {
    super();
    this.#opts = { minDelay: 500, maxDelay: 20000, timeout: 10000, ...options };
    this.#WebSocket = options.WebSocket ?? globalThis.WebSocket;
    if (typeof this.#WebSocket !== "function") {
      throw new TypeError("rally client: no WebSocket constructor: pass options.WebSocket (npm ws on Node 20)");
    }
    this.#url = wsURL(url);
    this.#token = options.token ?? "";
    /** @type {State} */
    this.state = "disconnected";
  }

  /** subscriptions are the topics subscribed to, by name. */
  get subscriptions() {
    return new Map(this.#subs);
  }

  /** connect starts connecting (no-op when already connected or connecting). */
  connect() {
    if (this.state === "connecting" || this.state === "connected") return;
    this.state = "connecting";
    this.#attempt = 0;
    this.#listenOnline(true);
    this.#schedule(0);
  }

  /**
   * close ends the connection with code (default 1000) and stops
   * reconnecting. Subscriptions and their positions are kept: a later
   * connect resumes them.
   */
  close(code = 1000, reason = "") {
    if (this.state === "closed") return;
    const wanted = this.state === "connected" || this.state === "connecting";
    this.state = "closed";
    this.#try++;
    this.#listenOnline(false);
    clearTimeout(this.#timer);
    this.#timer = null;
    const ws = this.#ws;
    this.#drop();
    if (ws) ws.close(code, reason);
    if (wanted) this[emit]("disconnected", { code, reason, reconnect: false });
  }

  /**
   * subscribe adds a topic (or returns the existing subscription). since,
   * a position, asks the server for every message after it.
   * @param {string} topic
   * @param {{since?: Position}} [options]
   * @returns {Subscription}
   */
  subscribe(topic, options = {}) {
    let sub = this.#subs.get(topic);
    if (sub) return sub;
    const since = options.since;
    if (since != null && position(since) === null) {
      throw new TypeError("rally client: since must be a position, {offset: number, epoch: string}");
    }
    sub = new Subscription(this, topic, since && position(since));
    this.#subs.set(topic, sub);
    if (this.state === "connected") this.#sendSubscribe(sub);
    return sub;
  }

  /** unsubscribe removes a topic; its messages stop. */
  unsubscribe(topic) {
    const sub = this.#subs.get(topic);
    if (!sub) return;
    this.#subs.delete(topic);
    sub.state = "unsubscribed";
    if (this.state === "connected") this.#send({ type: "unsubscribe", topic });
    const ev = { topic };
    sub[emit]("unsubscribed", ev);
    this[emit]("unsubscribed", ev);
  }

  /**
   * publish sends data (any JSON value) to every subscriber of topic. It
   * resolves once the server has handed the message on, and rejects with a
   * RallyError: the server's refusal, "not_connected" (nothing was sent:
   * publishes are not queued while disconnected), or "disconnected" (the
   * connection ended first: the message may or may not have gone out).
   * @param {string} topic
   * @param {any} data
   * @param {{self?: boolean}} [options] self: deliver to this client too
   * @returns {Promise<object>} the server's acknowledgement
   */
  publish(topic, data, options = {}) {
    const req = { type: "publish", topic, data };
    if (options.self) req.self = true;
    return this.#request(req, topic);
  }

  /**
   * presence asks who is subscribed to topic, on servers that track
   * presence for it; it resolves to the server's answer.
   * @param {string} topic
   */
  presence(topic) {
    return this.#request({ type: "presence", topic }, topic);
  }

  #request(req, topic) {
    if (this.state !== "connected") {
      return Promise.reject(new RallyError("not_connected", "rally client: not connected"));
    }
    const id = this.#nextID++;
    let text;
    try {
      text = JSON.stringify({ ...req, id });
    } catch (err) {
      return Promise.reject(err); // data that is not JSON (a BigInt, a cycle)
    }
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject, topic });
      this.#ws.send(text);
    });
  }

  #send(msg) {
    this.#ws.send(JSON.stringify(msg));
  }

  // #schedule starts the next attempt after delay ms.
  #schedule(delay) {
    clearTimeout(this.#timer);
    const n = ++this.#try;
    this[emit]("connecting", { attempt: this.#attempt, delay, ...this.#lastClose });
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.#open(n);
    }, delay);
  }

  // #retry schedules a reconnect with backoff, unless the client is closed
  // or the browser is offline (then "online" reconnects).
  #retry() {
    if (this.state === "closed") return;
    this.state = "connecting";
    if (this.#offline) return;
    this.#attempt++;
    this.#schedule(backoff(this.#attempt, this.#opts.minDelay, this.#opts.maxDelay));
  }

  // #open makes try n: a token first if one is needed, then the WebSocket.
  async #open(n) {
    if (this.state !== "connecting" || this.#offline) return;
    if (this.#opts.getToken && (!this.#token || this.#tokenStale || expired(this.#token))) {
      try {
        this.#token = String(await this.#opts.getToken());
        this.#tokenStale = false;
      } catch (err) {
        if (n !== this.#try || this.state !== "connecting") return;
        this[emit]("error", { code: "token", message: "rally client: getToken: " + String(err?.message ?? err), topic: "" });
        this.#lastClose = { code: 0, reason: "getToken failed" };
        this.#retry();
        return;
      }
      // close, offline or another try may have come while getToken ran.
      if (n !== this.#try || this.state !== "connecting" || this.#offline) return;
    }
    const url = new URL(this.#url);
    if (this.#token) url.searchParams.set("token", this.#token);
    let ws;
    try {
      ws = new this.#WebSocket(url.href);
    } catch (err) {
      this[emit]("error", { code: "url", message: "rally client: " + String(err?.message ?? err), topic: "" });
      this.close();
      return;
    }
    this.#ws = ws;
    let opened = false;
    // ended ends this try, or this connection once it opened.
    const ended = (code, reason) => {
      this.#drop();
      if (!opened || (code === 1008 && reason === "token expired")) this.#tokenStale = true;
      this.#lastClose = { code, reason };
      if (opened) this[emit]("disconnected", { code, reason, reconnect: this.state !== "closed" });
      this.#retry();
    };
    // Browsers and npm ws follow an error with a close event, which says
    // what happened. Node 20's WebSocket fires only the error when the
    // handshake fails (refused, or the TCP connection closed): an error
    // before the open ends the try at once, as the close (1006) would.
    ws.onerror = () => {
      if (this.#ws === ws && !opened) ended(1006, "");
    };
    this.#handshakeTimer = setTimeout(() => {
      if (this.#ws !== ws) return;
      this.#drop();
      ws.close();
      this.#tokenStale = true;
      this.#lastClose = { code: 1006, reason: "handshake timed out" };
      this.#retry();
    }, this.#opts.timeout);
    ws.onopen = () => {
      if (this.#ws !== ws) return;
      clearTimeout(this.#handshakeTimer);
      opened = true;
      const attempt = this.#attempt;
      this.#attempt = 0;
      this.state = "connected";
      for (const sub of this.#subs.values()) this.#sendSubscribe(sub);
      this[emit]("connected", { attempt });
    };
    ws.onmessage = (e) => {
      if (this.#ws !== ws) return;
      let m;
      try {
        m = JSON.parse(e.data);
      } catch {
        return;
      }
      this.#dispatch(m);
    };
    ws.onclose = (e) => {
      if (this.#ws === ws) ended(e.code ?? 1006, e.reason ?? "");
    };
  }

  // #drop forgets the current WebSocket: its events are ignored from now
  // on, unanswered requests fail, subscriptions wait for the next one.
  #drop() {
    clearTimeout(this.#handshakeTimer);
    const ws = this.#ws;
    this.#ws = null;
    // Not null: npm ws throws an "error" event that has no listener.
    if (ws) ws.onopen = ws.onmessage = ws.onclose = ws.onerror = ignore;
    if (this.state === "connected") this.state = "connecting";
    for (const sub of this.#subs.values()) if (sub.state === "subscribed") sub.state = "pending";
    const pending = this.#pending;
    this.#pending = new Map();
    for (const p of pending.values()) {
      p.reject?.(new RallyError("disconnected", "rally client: the connection ended before the server answered"));
    }
  }

  #sendSubscribe(sub) {
    const resubscribed = this.#acked.has(sub);
    const id = this.#nextID++;
    const req = { type: "subscribe", topic: sub.topic, id };
    const recovering = sub.position !== null;
    if (recovering) {
      req.offset = sub.position.offset;
      req.epoch = sub.position.epoch;
    }
    this.#pending.set(id, { sub, resubscribed, recovering });
    this.#send(req);
  }

  #dispatch(m) {
    switch (m.type) {
      case "message":
        return this.#message(m);
      case "ack":
      case "error":
      case "presence": {
        const p = m.id === undefined ? undefined : this.#pending.get(m.id);
        if (!p) {
          if (m.type === "error") this[emit]("error", { code: m.code, message: m.message, topic: m.topic ?? "" });
          return;
        }
        this.#pending.delete(m.id);
        if (p.sub) return this.#subscribeAnswer(p, m);
        if (m.type === "error") p.reject(new RallyError(m.code, m.message));
        else p.resolve(m);
        return;
      }
      case "join":
      case "leave": {
        const sub = this.#subs.get(m.topic);
        if (!sub) return;
        sub[emit]("presence", m);
        this[emit]("presence", m);
        return;
      }
    }
  }

  #subscribeAnswer({ sub, resubscribed, recovering }, m) {
    if (this.#subs.get(sub.topic) !== sub) return; // unsubscribed meanwhile
    if (m.type === "error") {
      this.#subs.delete(sub.topic);
      sub.state = "unsubscribed";
      const ev = { code: m.code, message: m.message, topic: sub.topic };
      sub[emit]("error", ev);
      this[emit]("error", ev);
      return;
    }
    sub.state = "subscribed";
    this.#acked.add(sub);
    const pos = position(m);
    let recovered = false;
    let reason = "";
    if (recovering) {
      recovered = m.recovered === true;
      if (!recovered) reason = typeof m.reason === "string" && m.reason ? m.reason : pos ? "unknown" : "no_history";
    } else if (resubscribed) {
      // Messages may have been missed and nothing could be asked for.
      reason = pos ? "no_position" : "no_history";
    }
    // After a recovery the ack's position is the topic's top, and the
    // replayed messages follow it: they move the position on. Otherwise
    // the ack's position is where this subscription starts.
    if (pos && !recovered) sub.position = pos;
    const ev = { topic: sub.topic, recovering, recovered, reason, resubscribed, position: sub.position, replayed: m.replayed ?? 0 };
    if (typeof m.client === "string") ev.client = m.client;
    sub[emit]("subscribed", ev);
    this[emit]("subscribed", ev);
  }

  #message(m) {
    const sub = this.#subs.get(m.topic);
    if (!sub) return;
    const pos = position(m);
    if (pos) {
      const last = sub.position;
      // A replayed message the server sends again after a switch from
      // history to live is the same message: deliver it once.
      if (last && last.epoch === pos.epoch && pos.offset <= last.offset) return;
      sub.position = pos;
    }
    const ev = { topic: m.topic, data: m.data, position: pos, encoding: m.encoding ?? "" };
    sub[emit]("message", ev);
    this[emit]("message", ev);
  }

  // #listenOnline follows the browser's online/offline events while the
  // client is wanted open: offline drops the connection (it is most
  // likely dead, and TCP would take minutes to say so) and waits; online
  // reconnects at once.
  #listenOnline(on) {
    const g = globalThis;
    if (typeof g.addEventListener !== "function" || typeof g.navigator?.onLine !== "boolean") return;
    if (on === this.#listening) return;
    this.#listening = on;
    if (on) {
      g.addEventListener("offline", this.#wentOffline);
      g.addEventListener("online", this.#cameOnline);
      this.#offline = !g.navigator.onLine;
    } else {
      g.removeEventListener("offline", this.#wentOffline);
      g.removeEventListener("online", this.#cameOnline);
      this.#offline = false;
    }
  }

  #wentOffline = () => {
    if (this.state === "closed" || this.#offline) return;
    this.#offline = true;
    this.#try++;
    clearTimeout(this.#timer);
    this.#timer = null;
    const ws = this.#ws;
    const wasOpen = this.state === "connected";
    this.#drop();
    this.state = "connecting";
    if (ws) ws.close();
    this.#lastClose = { code: 1006, reason: "offline" };
    if (wasOpen) this[emit]("disconnected", { code: 1006, reason: "offline", reconnect: true });
  };

  #cameOnline = () => {
    if (this.state === "closed" || !this.#offline) return;
    this.#offline = false;
    if (this.#ws || this.#timer) return;
    this.#attempt = 0;
    this.#schedule(0);
  };
}

function ignore() {}

// backoff is the delay before try number attempt (1, 2, ...): full jitter,
// a uniformly random time between 0 and min(max, min * 2^(attempt-1)), so
// that clients dropped together do not come back together.
function backoff(attempt, min, max) {
  const ceiling = Math.min(max, min * 2 ** Math.min(attempt - 1, 30));
  return Math.floor(Math.random() * ceiling);
}

// position reads a message's or an ack's position, or null.
function position(m) {
  if (typeof m.offset !== "number" || typeof m.epoch !== "string") return null;
  return { offset: m.offset, epoch: m.epoch };
}

// wsURL makes url absolute, with a ws: or wss: scheme.
function wsURL(url) {
  const base = globalThis.location?.href;
  const u = base ? new URL(url, base) : new URL(url);
  if (u.protocol === "http:") u.protocol = "ws:";
  else if (u.protocol === "https:") u.protocol = "wss:";
  return u.href;
}

// expired reports whether a JWT's exp claim has passed (or passes within
// 5 s); a token it cannot read is taken as valid (the server decides).
function expired(token) {
  try {
    const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    const claims = JSON.parse(atob(part + "=".repeat((4 - (part.length % 4)) % 4)));
    return typeof claims.exp === "number" && claims.exp * 1000 < Date.now() + 5000;
  } catch {
    return false;
  }
}
