// Placeholder for the press function (runtime cloudfront-js-2.0): it forwards every
// request unchanged, as the real one does whenever it cannot decide.
async function handler(event) {
    return event.request;
}
