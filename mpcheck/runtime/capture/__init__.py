"""How the checks see a running program: module hooks, the checking function mode, the strict
dispatch mode, and the session that installs and removes them."""
