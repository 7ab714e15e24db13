import { describe, expect, it } from "vitest";
import { providerErrorText } from "../../src/dispatch/provider-error";

describe("a model provider's error, as a turn's failure says it", () => {
  it("keeps the provider's message and drops the status repeated in front and the JSON around it", () => {
    expect(providerErrorText('500: {"message":"demo model failure: the model broke","type":"server_error"}', 500)).toBe("demo model failure: the model broke");
    expect(providerErrorText('401 {"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}', 401)).toBe("Incorrect API key provided");
    expect(providerErrorText('{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}', 529)).toBe("Overloaded");
    expect(providerErrorText('429 {"error":"rate limited"}', 429)).toBe("rate limited");
  });

  it("an HTML error page (a proxy's, a gateway's) is told by its title or its text, not its markup", () => {
    const nginx = "<html> <head><title>502 Bad Gateway</title></head> <body> <center><h1>502 Bad Gateway</h1></center> <hr><center>nginx</center> </body> </html>";
    expect(providerErrorText(`502 ${nginx}`, 502)).toBe("502 Bad Gateway (an HTML page)");
    expect(providerErrorText('<!DOCTYPE html><html lang="en-US"><head><meta charset="UTF-8" /><title>api.example.com | 504: Gateway time-out</title><style>body{x}</style></head>', 504)).toBe("api.example.com | 504: Gateway time-out (an HTML page)");
    expect(providerErrorText("<html><body><style>p{}</style><p>Service <b>unavailable</b></p></body></html>", 503)).toBe("Service unavailable (an HTML page)");
    // cut off mid-tag, as a long page is in a one-line reason
    expect(providerErrorText("<html><body><p>Down for maintenance</p><div class=", 503)).toBe("Down for maintenance (an HTML page)");
  });

  it("leaves what it cannot read as it came", () => {
    expect(providerErrorText("502 Bad Gateway", 502)).toBe("Bad Gateway");
    expect(providerErrorText('500 {"not json', 500)).toBe('{"not json');
    expect(providerErrorText('500 {"detail":"x"}', 500)).toBe('{"detail":"x"}');
    expect(providerErrorText("500", 500)).toBe("500");
    expect(providerErrorText("5000 things", 500)).toBe("5000 things");
  });
});
