import { render } from "preact";
import { App } from "./app";
import { takeTokenFromLocation } from "./lib/auth";
import "./style.css";

takeTokenFromLocation(location, history, localStorage);
render(<App />, document.getElementById("app")!);
