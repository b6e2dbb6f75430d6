// The service's clock as seen from the browser (docs/page.md). Every API answer carries the
// service's HTTP Date, in whole seconds: the service's time when it answered lies in
// [date, date + 1 s), and that moment lies between sending and receiving here. Each answer
// bounds the offset (service - this device); the bounds narrow as answers come.
export class ServiceClock {
  low = -Infinity;
  high = Infinity;

  // One answer's Date header (text), sent and received at these device times (ms).
  learn(date, sentAt, receivedAt) {
    const at = Date.parse(date ?? '');
    if (Number.isNaN(at)) return;
    const low = at - receivedAt;
    const high = at + 1000 - sentAt;
    if (low > this.high || high < this.low) {
      // This device's clock was set meanwhile: start again.
      this.low = low;
      this.high = high;
    } else {
      this.low = Math.max(this.low, low);
      this.high = Math.min(this.high, high);
    }
  }

  get known() {
    return Number.isFinite(this.low);
  }

  // Service time minus device time (ms): the middle of the bounds, 0 before any answer.
  get offset() {
    return this.known ? (this.low + this.high) / 2 : 0;
  }

  // How far the true offset may be from `offset` (ms).
  get margin() {
    return this.known ? (this.high - this.low) / 2 : Infinity;
  }

  now(device = Date.now()) {
    return device + this.offset;
  }

  // The earliest and the latest the service's time may be: a press is enabled only once the
  // opening is surely past, so it is never refused NOT_STARTED for the margin's sake.
  earliest(device = Date.now()) {
    return device + (this.known ? this.low : 0);
  }

  latest(device = Date.now()) {
    return device + (this.known ? this.high : 0);
  }
}
