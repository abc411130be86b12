// The viewer's login (docs/access.md, "IIIF Authorization Flow 2.0"): where the service has API keys, either
// "Log in" (no session) or "Log out" with who is logged in (GET /iiif/auth/whoami: the key's name or the subject),
// never both. Log in opens the access service's window; Log out POSTs to the logout service (its GET is a page that
// changes nothing). `onChange` runs after either, to list again what this browser may see.
import { logout, whoami } from "./api.js";

export class Session {
  constructor({ login, logout: out, who }, { onChange = async () => {}, onError = () => {} } = {}) {
    this.buttons = { login, out };
    this.who = who;
    this.onChange = onChange;
    this.onError = onError;
    this.loginUrl = null;
    this.me = null;      // {sub, name, scopes} of whoami, or null
    login.addEventListener("click", () => this.logIn());
    out.addEventListener("click", () => this.logOut());
  }

  get loggedIn() { return Boolean(this.me?.sub); }

  // `loginUrl`: the access service GET /v1/models names (null: the service has no keys: neither button).
  async update(loginUrl) {
    this.loginUrl = loginUrl;
    this.me = null;
    if (loginUrl) {
      try { this.me = await whoami(); } catch (e) { this.onError(e); }
    }
    this.show();
  }

  show() {
    const { login, out } = this.buttons;
    login.hidden = !this.loginUrl || this.loggedIn;
    out.hidden = !this.loginUrl || !this.loggedIn;
    this.who.hidden = !this.loginUrl || !this.loggedIn;
    this.who.textContent = this.loggedIn ? `logged in as ${this.me.name || this.me.sub}` : "";
    this.who.title = this.loggedIn ? `${this.me.sub}; scopes: ${this.me.scopes.join(" ") || "none"}` : "";
  }

  logIn() {
    const w = window.open(`${this.loginUrl}?origin=${encodeURIComponent(location.origin)}`, "inr-login");
    const timer = setInterval(async () => {
      if (w && !w.closed) return;
      clearInterval(timer);
      await this.update(this.loginUrl);
      await this.onChange();
    }, 200);
  }

  async logOut() {
    try {
      await logout();
    } catch (e) {
      this.onError(e);
    }
    await this.update(this.loginUrl);
    await this.onChange();
  }
}
