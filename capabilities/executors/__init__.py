"""What every executor shares (base: the observation contract, output store) and the dispatcher by kind;
the kinds themselves live in capabilities/kinds/{python,http,mcp}/."""
