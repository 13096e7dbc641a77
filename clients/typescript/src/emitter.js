// A minimal event emitter that runs in browsers and Node alike (no
// EventTarget subclassing, no Node `events`). A listener that throws is
// reported on the console and never breaks the library's own bookkeeping.

export class Emitter {
  constructor() {
    this.listeners = new Map();
  }

  // Returns the function that removes the listener.
  on(name, fn) {
    let set = this.listeners.get(name);
    if (!set) {
      set = new Set();
      this.listeners.set(name, set);
    }
    set.add(fn);
    return () => this.off(name, fn);
  }

  off(name, fn) {
    const set = this.listeners.get(name);
    if (set) {
      set.delete(fn);
    }
  }

  emit(name, value) {
    const set = this.listeners.get(name);
    if (!set) {
      return;
    }
    for (const fn of [...set]) {
      try {
        fn(value);
      } catch (err) {
        console.error("tether-client: a '" + name + "' listener threw", err);
      }
    }
  }
}
