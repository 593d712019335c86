// client-js-harness.mjs turns JSON commands into calls on rally's
// JavaScript client and its events into JSON objects, the same way in Node
// (client-js-peer.mjs) and in Chromium (clientjs_test.go loads it into the
// page), so that the Go tests drive both with one script.
//
// harness(Client, emit, extra) returns run(cmd). Commands:
//
//   new {url, options}            a Client (options: minDelay, maxDelay, timeout, token, refresh)
//   connect / close {code, reason}
//   subscribe {topic, since}      since: {offset, epoch} or absent
//   unsubscribe {topic}
//   publish {ref, topic, data, self}   -> {ev: "published", ref, ack} or {ev: "published", ref, errcode, message}
//   presence {ref, topic}              -> {ev: "presence-answer", ref, answer} or {..., errcode, message}
//   token {token}                 answers the waiting {ev: "getToken"}
//
// Every client event is emitted as {ev: <its name>, ...its fields}, except
// that an "error" event's code travels as errcode. With options.refresh the
// client's getToken asks the test: {ev: "getToken"}, answered by a token
// command. extra holds options added to every Client (Node 20: WebSocket).
export function harness(Client, emit, extra = {}) {
  let client = null;
  let tokenWaiters = [];
  const events = ["connecting", "connected", "disconnected", "subscribed", "message", "unsubscribed", "presence", "error"];
  const commands = {
    new(cmd) {
      const options = { ...cmd.options, ...extra };
      if (options.refresh) {
        delete options.refresh;
        options.getToken = () =>
          new Promise((resolve) => {
            tokenWaiters.push(resolve);
            emit({ ev: "getToken" });
          });
      }
      client = new Client(cmd.url, options);
      for (const type of events) {
        client.on(type, (e) => {
          if (type === "error") emit({ ev: type, errcode: e.code, message: e.message, topic: e.topic });
          else emit({ ev: type, ...e });
        });
      }
    },
    connect() {
      client.connect();
    },
    close(cmd) {
      client?.close(cmd.code || 1000, cmd.reason || "");
    },
    subscribe(cmd) {
      client.subscribe(cmd.topic, cmd.since ? { since: cmd.since } : {});
    },
    unsubscribe(cmd) {
      client.unsubscribe(cmd.topic);
    },
    publish(cmd) {
      client.publish(cmd.topic, cmd.data, { self: cmd.self }).then(
        (ack) => emit({ ev: "published", ref: cmd.ref, ack }),
        (err) => emit({ ev: "published", ref: cmd.ref, errcode: err.code, message: err.message }),
      );
    },
    presence(cmd) {
      client.presence(cmd.topic).then(
        (answer) => emit({ ev: "presence-answer", ref: cmd.ref, answer }),
        (err) => emit({ ev: "presence-answer", ref: cmd.ref, errcode: err.code, message: err.message }),
      );
    },
    token(cmd) {
      const waiters = tokenWaiters;
      tokenWaiters = [];
      for (const resolve of waiters) resolve(cmd.token);
    },
  };
  return (cmd) => {
    try {
      commands[cmd.cmd](cmd);
    } catch (err) {
      emit({ ev: "fatal", message: String(err?.stack ?? err) });
    }
    return true;
  };
}
